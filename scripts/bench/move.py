"""Moving a session between two machines (issue 38 §3): the bundle's size and the whole move's
time ("Move to…" over the real stack: a server, two workers with their own homes, real git),
for this repository's own tree (a clone, with an uncommitted change and an untracked file) and
for a 50,000-file tree (a plain folder: a shadow repository does the snapshot).

    uv run python scripts/bench/move.py            # both trees (~2 minutes on 2 cores)
    uv run python scripts/bench/move.py --files 5000   # a smaller generated tree

The move time is the POST's own (refusal checks, the source's processes stopped, snapshot and
bundle on the source, the chunked read into the blob store, the unpack on the target, the
event); the files on the target are checked against the source's after each move.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import figure, info

from codey_testkit.model_handle import start_model_server
from codey_testkit.scenarios import create_session, provider_config, wait_for
from codey_testkit.stack import ServerProcess, WorkerProcess

REPO = Path(__file__).resolve().parents[2]


def _files(folder: Path) -> dict[str, int]:
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in folder.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(folder).parts}


def _move(server: ServerProcess, a: WorkerProcess, b: WorkerProcess, folder: Path,
          label: str) -> None:
    started = time.monotonic()
    sid = create_session(server, a, str(folder), "hello")
    wait_for(server, sid, lambda s: s["status"] == "idle" and any(
        i["kind"] == "assistant_message" for i in s["items"]), timeout=120.0,
        what="the first answer")
    info(f"{label}: session started", f"{time.monotonic() - started:.1f} s")
    target = Path(b.workdir(f"{folder.name}-moved"))
    started = time.monotonic()
    r = server.http.post(f"/api/sessions/{sid}/move", timeout=900.0,
                         json={"worker_id": b.worker_id, "workdir": str(target)})
    took = time.monotonic() - started
    if r.status_code != 200:
        info(label, f"refused: {r.status_code} {r.text}")
        return
    done = r.json()
    there, here = _files(target), _files(folder)
    # (the source's ignored files stay behind: none in these trees)
    same = there == here
    figure(f"{label}: files", done["files"], "", "", None)
    figure(f"{label}: bundle size", done["bundle_size"] / (1024 * 1024), "MiB", "", None)
    figure(f"{label}: move time", took, "s", "", None)
    info(f"{label}: files on the target", "equal the source's" if same else "DIFFER")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=50_000)
    parser.add_argument("--only", choices=("repo", "files"), default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="codey-bench-move-") as tmp_text:
        tmp = Path(tmp_text)
        model = start_model_server({"model": "scripted-1", "steps": [
            {"match": {"any": True}, "reply": {"text": "ready"}}]}, tmp / "model")
        try:
            with ServerProcess(tmp / "server", config=provider_config(model)) as server, \
                    WorkerProcess(server, tmp / "a", name="a") as a, \
                    WorkerProcess(server, tmp / "b", name="b") as b:
                if args.only != "files":
                    # this repository's own tree, with its history, a change and a new file
                    own = Path(a.workdir("codey"))
                    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO),
                                    str(own)], check=True)
                    with (own / "README.md").open("a") as f:
                        f.write("\nan uncommitted line\n")
                    (own / "untracked.txt").write_text("new\n")
                    _move(server, a, b, own, "this repository")
                if args.only != "repo":
                    # a generated tree of small files, no repository
                    big = Path(a.workdir("files"))
                    started = time.monotonic()
                    for n in range(args.files):
                        d = big / f"d{n // 500:03d}"
                        if n % 500 == 0:
                            d.mkdir(parents=True)
                        (d / f"f{n:05d}.txt").write_text(f"file {n}\n" * 4)
                    info("tree written", f"{time.monotonic() - started:.1f} s")
                    _move(server, a, b, big, f"{args.files:,} files")
        finally:
            model.stop()


if __name__ == "__main__":
    main()

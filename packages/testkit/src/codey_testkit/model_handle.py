"""Starting the scripted model server as a real process, from tests, e2e and benchmarks.

::

    with start_model_server({"steps": [...]}, tmp_path) as model:
        client = openai.OpenAI(base_url=model.base_url, api_key="x")
        ...
        assert model.requests()[0]["step"] == 0

Kept free of server-side imports (litestar, uvicorn) so importing it is cheap; the server
re-exports it, so it imports httpx only where used.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Self

from codey_testkit.errors import TestkitError
from codey_testkit.procs import ManagedProcess, StopsOnExit

__all__ = ["ModelServerHandle", "start_model_server"]

_READY_RE = r"codey-model-server listening on (http://[\w.\-\[\]:]+:\d+)"


class ModelServerHandle(StopsOnExit):
    """A running model server process.

    ``url`` is the root (``http://127.0.0.1:PORT``; what Ollama clients take), ``base_url``
    is ``url + "/v1"`` (what OpenAI clients take). Leaving the ``with`` block, or
    :meth:`stop`, ends the process.
    """

    def __init__(self, process: ManagedProcess, url: str, api_key: str | None = None) -> None:
        self.process = process
        self.url = url
        self.base_url = f"{url}/v1"
        self.api_key = api_key

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def requests(self, path: str | None = None) -> list[dict[str, Any]]:
        """Recorded requests, oldest first (optionally only those to ``path``).

        Each: ``seq, ts, peer`` (the client's ``host:port``: calls with one peer came over one
        kept-alive connection), ``method, path, query, headers`` (no Authorization), ``bearer``
        (bool), ``body``, ``api``, ``latest``, ``step`` (matched index or None), ``stream``,
        ``status``.
        """
        params = {"path": path} if path else None
        import httpx

        reply = httpx.get(f"{self.url}/_requests", params=params, timeout=10)
        reply.raise_for_status()
        records: list[dict[str, Any]] = reply.json()["requests"]
        return records

    def step_uses(self) -> list[int]:
        """How many times each step of the current script has answered."""
        import httpx

        reply = httpx.get(f"{self.url}/_requests", timeout=10)
        reply.raise_for_status()
        uses: list[int] = reply.json()["step_uses"]
        return uses

    def clear_requests(self) -> None:
        import httpx

        httpx.delete(f"{self.url}/_requests", timeout=10).raise_for_status()

    def set_script(self, script: Mapping[str, Any] | list[Any] | Path) -> None:
        """Replace the script (use counts restart). Raises TestkitError if the server rejects
        it."""
        data = _script_data(script)
        import httpx

        reply = httpx.post(f"{self.url}/_script", json=data, timeout=10)
        if reply.status_code != 200:
            raise TestkitError(f"model server rejected the script: {reply.text}")

    def stop(self, timeout: float = 10.0) -> int | None:
        return self.process.stop(timeout=timeout)

    def __enter__(self) -> Self:
        return self



def _script_data(script: Mapping[str, Any] | list[Any] | Path) -> Any:
    if isinstance(script, Path):
        import msgspec

        from codey_testkit.script import load_script  # local: msgspec/yaml only when needed

        return msgspec.to_builtins(load_script(script))
    return script if isinstance(script, list) else dict(script)


def start_model_server(
    script: Mapping[str, Any] | list[Any] | Path,
    tmp_path: Path,
    api_key: str | None = None,
    oidc_issuer: str | None = None,
    *,
    oidc_audience: str | None = None,
    timeout: float = 20.0,
    name: str = "model-server",
    backlog: int | None = None,
    max_records: int | None = None,
) -> ModelServerHandle:
    """Start ``codey-model-server`` on port 0 and wait until it listens.

    A mapping/list script is written as JSON into ``tmp_path``; a Path is used as is. The log
    goes to ``tmp_path/<name>.log``. ``backlog``: its listen backlog (uvicorn's 2048 when
    None); 5 is a small accept queue, as many self-hosted model servers have. ``max_records``:
    how many requests it keeps for :meth:`ModelServerHandle.requests` (its 10,000 when None;
    a long benchmark keeps few, or the bodies fill the machine's memory). Raises
    ProcessExitedError (bad script, crash) or ProcessTimeoutError, both with the log tail.
    """
    tmp_path.mkdir(parents=True, exist_ok=True)
    if isinstance(script, Path):
        script_path = script
    else:
        script_path = tmp_path / f"{name}-script.json"
        script_path.write_text(json.dumps(_script_data(script)), encoding="utf-8")
    argv = [sys.executable, "-m", "codey_testkit.model_server", "--host", "127.0.0.1",
            "--port", "0", "--script", str(script_path)]
    if api_key is not None:
        argv += ["--api-key", api_key]
    if oidc_issuer is not None:
        argv += ["--oidc-issuer", oidc_issuer]
    if oidc_audience is not None:
        argv += ["--oidc-audience", oidc_audience]
    if backlog is not None:
        argv += ["--backlog", str(backlog)]
    if max_records is not None:
        argv += ["--max-records", str(max_records)]
    process = ManagedProcess(name, log_dir=tmp_path)
    process.start(argv)
    try:
        url = process.wait_for_url(_READY_RE, timeout=timeout)
    except BaseException:
        process.stop(timeout=2)
        raise
    return ModelServerHandle(process, url, api_key)

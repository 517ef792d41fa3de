"""Moving a session to another machine (issue 38 §3): the source's bundle, the target's unpack.

The order of calls, on the worker's side (the server drives it, ``codey_server/moves``):

1. ``session_bundle`` on the source (:meth:`Mover.bundle`): a snapshot commit of the session's
   workdir as it is — tracked and untracked files, not ignored ones — made with a temporary
   index (:func:`snapshot`: the user's index, HEAD, stash and branches are not touched; only
   objects are added), its HEAD, and the session's checkpoint refs
   (``refs/codey/checkpoints/<session>/*``) go into one git bundle, kept in memory. A folder
   that is not in a repository is snapshotted in a shadow repository under
   ``$CODEY_HOME/moves/`` (never in the user's folder), removed once bundled.
2. ``session_bundle_read`` (:meth:`Mover.read`), as many times as it takes: a frame from a
   worker is 1 MiB at most, so the server reads the bundle in chunks; it is forgotten once
   read to its end.
3. ``session_unpack`` on the target (:meth:`Mover.unpack`): into a new (or empty) folder
   inside the target's allowed roots. A repository's bundle gives a repository there with
   the source's branch at the source's HEAD, and the snapshot's files in the work tree, so
   uncommitted changes are uncommitted changes there too (and untracked files untracked);
   a plain folder's gives the files alone. A bundle holding refs outside the session's own
   namespace is refused before anything is fetched; objects are fsck'd as they come in.

Every git here goes through the hardened runner (:mod:`codey_worker.git`), in the sandbox,
with only the folder it works on (and the shadow repository) writable.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from codey_protocol.worker import (
    BundleChunk,
    SessionBundle,
    SessionBundled,
    SessionBundleRead,
    SessionUnpack,
    SessionUnpacked,
)
from codey_worker.confine import ActionRefused
from codey_worker.git import Access, GitRunner, Repo, find_repo
from codey_worker.policy import LocalPolicy

__all__ = ["BUNDLES_KEPT", "Mover", "move_refs", "snapshot"]

#: bundles kept in memory at once (each until it is read to its end)
BUNDLES_KEPT = 4
_SESSION = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
#: who a snapshot commit is by (the user's identity is not needed, nor read)
_IDENTITY = {"GIT_AUTHOR_NAME": "Codey", "GIT_AUTHOR_EMAIL": "codey@localhost",
             "GIT_COMMITTER_NAME": "Codey", "GIT_COMMITTER_EMAIL": "codey@localhost"}


def move_refs(session_id: str) -> tuple[str, str]:
    """The ref namespaces a session's bundle may hold: its move's and its checkpoints'."""
    if not _SESSION.match(session_id) or session_id.strip(".") == "":
        raise ActionRefused("bad_request", f"not a session id: {session_id!r}")
    return f"refs/codey/move/{session_id}/", f"refs/codey/checkpoints/{session_id}/"


async def snapshot(runner: GitRunner, repo: Repo, *, scratch: Path, access: Access,
                   message: str = "codey: the session's files as they were") -> str:
    """A commit of ``repo``'s work tree as it is (tracked and untracked files, not ignored
    ones), whose parent is HEAD (none on an unborn branch); its id. Made with a temporary
    index in ``scratch`` (a folder git may write, ``access`` says so): the repository's own
    index, HEAD, refs and stash are left as they were."""
    index = scratch / f"codey-index-{secrets.token_hex(6)}"
    env = {"GIT_INDEX_FILE": str(index), **_IDENTITY}
    try:
        head = await _head(runner, repo)
        if head:
            await runner.run(repo.top, "read-tree", head, repo=repo, access=access, env=env)
        await runner.run(repo.top, "add", "-A", "--", ".", repo=repo, access=access, env=env,
                         timeout_s=600.0)
        tree = (await runner.run(repo.top, "write-tree", repo=repo, access=access,
                                 env=env)).text()
        parent = ("-p", head) if head else ()
        commit = await runner.run(repo.top, "commit-tree", tree, *parent, "-m", message,
                                  repo=repo, access=access, env=env)
        return commit.text()
    finally:
        index.unlink(missing_ok=True)


async def _head(runner: GitRunner, repo: Repo) -> str:
    done = await runner.run(repo.top, "rev-parse", "--verify", "-q", "HEAD^{commit}",
                            repo=repo, check=False)
    return done.text() if done.code == 0 else ""


@dataclass
class _Kept:
    data: bytes


class Mover:
    """The move's three actions on this worker (see the module)."""

    def __init__(self, policy: LocalPolicy, git: GitRunner, home: Path) -> None:
        self.policy = policy
        self.git = git
        self.home = home
        self._bundles: dict[str, _Kept] = {}

    # -- the source --------------------------------------------------------------------------

    async def bundle(self, action: SessionBundle) -> SessionBundled:
        prefix, checkpoints = move_refs(action.session_id)
        folder = self.policy.check_workdir(action.workdir)
        if not folder.is_dir():
            raise ActionRefused("not_found", f"{folder} is not a folder on this machine")
        repo = find_repo(folder)
        if repo is not None and repo.top != folder:
            # a folder inside a repository: the repository's whole work tree goes
            folder = repo.top
        shadow: Path | None = None
        try:
            if repo is None:
                shadow = self._shadow()
                await self.git.run(folder, "init", "-q", str(shadow), access=Access(
                    exposed=(shadow,)))
                repo = Repo(top=folder, git_dir=shadow / ".git", common_dir=shadow / ".git")
                access = Access(exposed=(shadow,))
                scratch = shadow / ".git"
            else:
                access = Access(writes=repo.git_dirs)
                scratch = repo.git_dir
            head = "" if shadow is not None else await _head(self.git, repo)
            commit = await snapshot(self.git, repo, scratch=scratch, access=access)
            branch = ""
            if shadow is None:
                done = await self.git.run(folder, "symbolic-ref", "-q", "--short", "HEAD",
                                          repo=repo, check=False)
                branch = done.text() if done.code == 0 else ""
            refs = [f"{prefix}snapshot"]
            await self.git.run(folder, "update-ref", refs[0], commit, repo=repo, access=access)
            if head:
                refs.append(f"{prefix}head")
                await self.git.run(folder, "update-ref", refs[1], head, repo=repo,
                                   access=access)
            try:
                listed = await self.git.run(folder, "for-each-ref", "--format=%(refname)",
                                            checkpoints, repo=repo, access=access)
                refs += [r for r in listed.text().splitlines() if r.startswith(checkpoints)]
                made = await self.git.run(folder, "bundle", "create", "-q", "-", *refs,
                                          repo=repo, access=access, timeout_s=600.0,
                                          limit=action.max_bytes)
            finally:
                for ref in refs[:2]:
                    await self.git.run(folder, "update-ref", "-d", ref, repo=repo,
                                       access=access, check=False)
            if made.cut:
                raise ActionRefused("too_large", f"the session's work in {folder} bundles to "
                                    f"more than {action.max_bytes // (1024 * 1024)} MiB, the "
                                    "most a move carries")
            files = await self.git.run(folder, "ls-tree", "-r", "--name-only", "-z", commit,
                                       repo=repo, access=access)
        finally:
            if shadow is not None:
                shutil.rmtree(shadow, ignore_errors=True)
        while len(self._bundles) >= BUNDLES_KEPT:
            self._bundles.pop(next(iter(self._bundles)))
        self._bundles[action.action_id] = _Kept(made.out)
        return SessionBundled(
            bundle_id=action.action_id, size=len(made.out),
            sha256=hashlib.sha256(made.out).hexdigest(),
            source="plain" if shadow is not None else "git", branch=branch, head=head,
            snapshot=commit, files=files.out.count(b"\0"))

    def read(self, action: SessionBundleRead) -> BundleChunk:
        kept = self._bundles.get(action.bundle_id)
        if kept is None:
            raise ActionRefused("bundle_gone", "this worker holds no such bundle (it restarted, "
                                "or the bundle was read to its end): bundle the session again")
        if action.offset < 0 or action.length <= 0:
            raise ActionRefused("bad_request", "offset and length must be positive")
        part = kept.data[action.offset:action.offset + min(action.length, 512 * 1024)]
        eof = action.offset + len(part) >= len(kept.data)
        if eof:
            self._bundles.pop(action.bundle_id, None)
        return BundleChunk(data_b64=base64.b64encode(part).decode("ascii"), eof=eof)

    def _shadow(self) -> Path:
        shadow = self.home / "moves" / secrets.token_hex(8)
        shadow.mkdir(parents=True, mode=0o700)
        return shadow

    # -- the target --------------------------------------------------------------------------

    async def unpack(self, action: SessionUnpack) -> SessionUnpacked:
        prefixes = move_refs(action.session_id)
        for name, value in (("snapshot", action.snapshot), ("head", action.head)):
            if value and not re.fullmatch(r"[0-9a-f]{40}([0-9a-f]{24})?", value):
                raise ActionRefused("bad_request", f"{name} is not a commit id: {value!r}")
        if not action.snapshot:
            raise ActionRefused("bad_request", "the bundle's snapshot commit is missing")
        try:
            data = base64.b64decode(action.bundle_b64, validate=True)
        except ValueError:
            raise ActionRefused("bad_request", "the bundle is not base64") from None
        folder = self.policy.check_workdir(action.workdir)
        if os.path.lexists(folder):
            if not folder.is_dir() or any(folder.iterdir()):
                raise ActionRefused("conflict", f"{folder} exists and is not an empty folder: "
                                    "pick a new folder for the moved session")
        else:
            try:
                folder.mkdir(parents=True)
            except OSError as exc:
                raise ActionRefused("io_error",
                                    f"cannot create {folder}: {exc.strerror or exc}") from None
        # made now: checked again, so a link swapped in meanwhile is not followed out
        folder = self.policy.check_workdir(str(folder))
        shadow: Path | None = None
        try:
            if action.source == "git":
                access = Access(writes=(folder,))
                await self.git.run(folder, "init", "-q", str(folder), access=access)
                repo = find_repo(folder)
                if repo is None or repo.top != folder:
                    raise ActionRefused("git_failed", f"no repository was made in {folder}")
                scratch = repo.git_dir
            else:
                shadow = self._shadow()
                access = Access(writes=(folder,), exposed=(shadow,))
                await self.git.run(folder, "init", "-q", str(shadow), access=access)
                repo = Repo(top=folder, git_dir=shadow / ".git", common_dir=shadow / ".git")
                scratch = shadow / ".git"
            bundle = scratch / f"codey-move-{secrets.token_hex(6)}.bundle"
            bundle.write_bytes(data)
            try:
                files = await self._fetch(repo, access, bundle, prefixes, action)
            finally:
                bundle.unlink(missing_ok=True)
        except BaseException:
            # nothing half-made is left for the session: the folder was new (or empty)
            shutil.rmtree(folder, ignore_errors=True)
            raise
        finally:
            if shadow is not None:
                shutil.rmtree(shadow, ignore_errors=True)
        return SessionUnpacked(path=str(folder), files=files, source=action.source)

    async def _fetch(self, repo: Repo, access: Access, bundle: Path,
                     prefixes: tuple[str, str], action: SessionUnpack) -> int:
        top = repo.top
        heads = await self.git.run(top, "bundle", "list-heads", str(bundle), repo=repo,
                                   access=access)
        for line in heads.text().splitlines():
            ref = line.partition(" ")[2]
            if not ref.startswith(prefixes):
                raise ActionRefused("bad_bundle", f"the bundle holds {ref!r}, outside the "
                                    f"session's own refs ({prefixes[0]}*, {prefixes[1]}*); "
                                    "nothing was unpacked")
        move, checkpoints = prefixes
        await self.git.run(
            top, "-c", "fetch.fsckObjects=true", "-c", "transfer.fsckObjects=true",
            "fetch", "-q", "--no-tags", "--no-write-fetch-head", str(bundle),
            f"+{move}*:{move}*", f"+{checkpoints}*:{checkpoints}*",
            repo=repo, access=access, timeout_s=600.0)
        got = (await self.git.run(top, "rev-parse", "--verify", "-q",
                                  f"{move}snapshot^{{commit}}", repo=repo,
                                  access=access)).text()
        if got != action.snapshot:
            raise ActionRefused("bad_bundle", f"the bundle's snapshot is {got[:12]}, not "
                                f"{action.snapshot[:12]} as the source said")
        head = ""
        if action.head:
            head = (await self.git.run(top, "rev-parse", "--verify", "-q",
                                       f"{move}head^{{commit}}", repo=repo,
                                       access=access)).text()
            if head != action.head:
                raise ActionRefused("bad_bundle", "the bundle's HEAD is not the source's")
        if action.source == "git" and head:
            branch = action.branch
            if branch:
                ok = await self.git.run(top, "check-ref-format", "--branch", branch,
                                        repo=repo, access=access, check=False)
                branch = branch if ok.code == 0 and not branch.startswith("-") else ""
            if branch:
                await self.git.run(top, "update-ref", f"refs/heads/{branch}", head, repo=repo,
                                   access=access)
                await self.git.run(top, "symbolic-ref", "HEAD", f"refs/heads/{branch}",
                                   repo=repo, access=access)
            else:
                await self.git.run(top, "update-ref", "--no-deref", "HEAD", head, repo=repo,
                                   access=access)
        # the files as they were: the snapshot written out, then the index back to HEAD, so
        # what was uncommitted there is uncommitted here
        await self.git.run(top, "read-tree", action.snapshot, repo=repo, access=access)
        await self.git.run(top, "checkout-index", "-a", "-f", repo=repo, access=access,
                           timeout_s=600.0)
        if action.source == "git":
            if head:
                await self.git.run(top, "read-tree", head, repo=repo, access=access)
            else:
                await self.git.run(top, "read-tree", "--empty", repo=repo, access=access)
            await self.git.run(top, "update-index", "-q", "--refresh", repo=repo,
                               access=access, check=False)
        listed = await self.git.run(top, "ls-tree", "-r", "--name-only", "-z",
                                    action.snapshot, repo=repo, access=access)
        for ref in (f"{move}snapshot", f"{move}head"):
            await self.git.run(top, "update-ref", "-d", ref, repo=repo, access=access,
                               check=False)
        return listed.out.count(b"\0")

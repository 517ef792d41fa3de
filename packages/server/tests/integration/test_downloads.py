"""``/dl/``: the worker's wheels, handed out without a login, built once and cached."""

from __future__ import annotations

import zipfile
from io import BytesIO
from pathlib import Path

import httpx
import pytest

from codey_testkit.stack import ServerProcess

pytestmark = pytest.mark.integration


def test_wheels_are_public_built_once_and_carry_no_secret(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "server")
    with server:
        anonymous = httpx.Client(base_url=server.url, timeout=180)  # no cookie, no token
        assert anonymous.get("/api/state/bootstrap").status_code == 401  # the API is not
        index = anonymous.get("/dl/index.json")
        assert index.status_code == 200, index.text
        body = index.json()
        wheel = f"codey_worker-{body['version']}-py3-none-any.whl"
        assert body["worker"] == f"/dl/{body['key']}/{wheel}"
        assert body["protocol"].startswith(f"/dl/{body['key']}/codey_protocol-")
        for path in (body["worker"], body["protocol"]):
            r = anonymous.get(path)
            assert r.status_code == 200
            assert "immutable" in r.headers["cache-control"]
            assert server.token and server.token.encode() not in r.content
            assert str(server.data_dir).encode() not in r.content
            with zipfile.ZipFile(BytesIO(r.content)) as z:
                assert any(n.endswith(".dist-info/METADATA") for n in z.namelist())
        worker = zipfile.ZipFile(BytesIO(anonymous.get(body["worker"]).content))
        assert "codey_worker/cli.py" in worker.namelist()
        entry = next(n for n in worker.namelist() if n.endswith("entry_points.txt"))
        assert "codey-worker = codey_worker.cli:main" in worker.read(entry).decode()
        # only what the index names; no walking the data dir
        assert anonymous.get(f"/dl/{body['key']}/events.db").status_code == 404
        assert anonymous.get(f"/dl/{body['key']}/..%2Faccess_token").status_code == 404
        assert anonymous.get(body["worker"].replace(body["key"], "0" * 16)).status_code == 404
        # a foreign Host is refused here as everywhere (DNS rebinding)
        evil = anonymous.get("/dl/index.json", headers={"Host": "evil.example"})
        assert evil.status_code == 403
        anonymous.close()
    cached = server.data_dir / "dl" / body["key"]
    assert sorted(p.name for p in cached.iterdir()) == sorted(
        [body["worker"].rsplit("/", 1)[1], body["protocol"].rsplit("/", 1)[1]])
    assert "built the worker's wheels" in server.log_text()

    built_at = {p.name: p.stat().st_mtime_ns for p in cached.iterdir()}
    with server:  # a restart with the same sources reuses the cache
        again = httpx.get(f"{server.url}/dl/index.json", timeout=60).json()
        assert again == body
    assert {p.name: p.stat().st_mtime_ns for p in cached.iterdir()} == built_at
    assert "built the worker's wheels" not in server.log_text()  # this start's log

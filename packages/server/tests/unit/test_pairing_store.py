"""Pairing over its store, without a server: the credential is made when the worker collects
the approval (only its hash is ever kept), an answer is delivered once, wrong codes lock the
request, and of two approvals one wins."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from codey_protocol.worker import PairRequest
from codey_server.core.engine import Engine
from codey_server.eventlog import MemoryEventLog
from codey_server.features import RULES
from codey_server.workers.keys import FileWorkerKeys
from codey_server.workers.pairing import MAX_WRONG_ATTEMPTS, Pairing, PairingError
from codey_testkit.waiting import until


def _request() -> PairRequest:
    raw = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return PairRequest(public_key=base64.urlsafe_b64encode(raw).rstrip(b"=").decode(),
                       hostname="box", os="Linux", python_version="3.11",
                       worker_version="0.1.0", roots=["/src"])


async def _pairing(tmp_path: Path) -> tuple[Pairing, FileWorkerKeys]:
    engine = Engine(MemoryEventLog(), RULES)
    await engine.start()
    keys = FileWorkerKeys(tmp_path / "workers.json")
    pairing = Pairing(engine, keys)
    await pairing.start()
    return pairing, keys


def test_the_credential_is_made_at_collection_delivered_once_and_only_hashed(
        tmp_path: Path) -> None:
    async def main() -> None:
        pairing, keys = await _pairing(tmp_path)
        ticket = await pairing.request(_request(), "10.0.0.5")
        # the poll waits once it watches the request (taken before its read: a change after
        # it wakes the poll)
        watched: list[str] = []
        watch = pairing.store.watch

        def watching(request_id: str) -> asyncio.Event:
            watched.append(request_id)
            return watch(request_id)

        pairing.store.watch = watching  # type: ignore[method-assign]
        waiting = asyncio.create_task(pairing.wait(ticket.request_id, ticket.poll_secret, 5))
        await until(lambda: watched, what="the poll to watch the request")
        assert not waiting.done()
        worker_id = await pairing.approve(ticket.request_id, ticket.code.lower())
        status = await asyncio.wait_for(waiting, 5)  # woken by the approval, not the timeout
        assert status.status == "approved" and status.worker_id == worker_id
        assert status.credential and await keys.check(worker_id, status.credential)
        assert status.credential not in (tmp_path / "workers.json").read_text()
        with pytest.raises(PairingError) as again:
            await pairing.wait(ticket.request_id, ticket.poll_secret, 0)
        assert again.value.code == "not_found"  # delivered once

    asyncio.run(main())


def test_a_key_approved_but_not_collected_opens_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        pairing, keys = await _pairing(tmp_path)
        ticket = await pairing.request(_request())
        worker_id = await pairing.approve(ticket.request_id, ticket.code)
        stored = json.loads((tmp_path / "workers.json").read_text())[worker_id]
        assert stored["credential"] == ""
        assert await keys.check(worker_id, "") is None
        assert await keys.check(worker_id, "anything") is None

    asyncio.run(main())


def test_wrong_codes_lock_the_request_and_a_second_approval_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        pairing, _ = await _pairing(tmp_path)
        ticket = await pairing.request(_request())
        for n in range(1, MAX_WRONG_ATTEMPTS):
            with pytest.raises(PairingError) as wrong:
                await pairing.approve(ticket.request_id, "BBBB-BBBB")
            assert wrong.value.code == "wrong_code"
            assert f"{MAX_WRONG_ATTEMPTS - n} tries left" in wrong.value.message
        with pytest.raises(PairingError) as locked:
            await pairing.approve(ticket.request_id, "BBBB-BBBB")
        assert locked.value.code == "locked"
        with pytest.raises(PairingError) as still:
            await pairing.approve(ticket.request_id, ticket.code)  # the right code, too late
        assert still.value.code == "locked"
        status = await pairing.wait(ticket.request_id, ticket.poll_secret, 0)
        assert status.status == "locked"

        other = await pairing.request(_request())
        first, second = await asyncio.gather(
            pairing.approve(other.request_id, other.code),
            pairing.approve(other.request_id, other.code), return_exceptions=True)
        assert sum(isinstance(r, str) for r in (first, second)) == 1  # one worker, not two

    asyncio.run(main())


def test_a_wrong_poll_secret_finds_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        pairing, _ = await _pairing(tmp_path)
        ticket = await pairing.request(_request())
        for secret in ("", "x", ticket.poll_secret + "x", "é" * 10):
            with pytest.raises(PairingError) as err:
                await pairing.wait(ticket.request_id, secret, 0)
            assert err.value.code == "not_found"

    asyncio.run(main())

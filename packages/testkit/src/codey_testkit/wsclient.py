"""A small synchronous browser-socket client for integration tests."""

from __future__ import annotations

import json
import socket
from typing import Any
from urllib.parse import urlsplit

from websockets.exceptions import ConnectionClosed
from websockets.sync.client import ClientConnection, connect

from codey_testkit.stack import ServerProcess
from codey_testkit.waiting import Deadline, WaitTimedOut


class BrowserSocket:
    """Subscribes like the web client; collects envelopes by seq."""

    def __init__(self, server: ServerProcess, after_seq: int = 0, *,
                 rcvbuf: int | None = None) -> None:
        sock = None
        if rcvbuf is not None:
            # a small receive buffer makes a slow reader fill the server's queue quickly
            host, port = urlsplit(server.url).hostname, urlsplit(server.url).port
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
            sock.connect((host, port))
        self.ws: ClientConnection = connect(
            server.ws_url, additional_headers=server.cookie_header(), max_size=None,
            open_timeout=10, legacy=True, sock=sock, max_queue=1 if rcvbuf else 16)
        self.snapshot: dict[str, Any] | None = None
        self.envelopes: list[dict[str, Any]] = []
        self.frames: list[dict[str, Any]] = []
        self.last_seq = after_seq
        self.closed = False
        self.close_code: int | None = None
        self.send({"type": "subscribe", "after_seq": after_seq})

    def send(self, msg: dict[str, Any]) -> None:
        self.ws.send(json.dumps(msg))

    def recv(self, timeout: float) -> dict[str, Any] | None:
        if self.closed:
            return None
        try:
            raw = self.ws.recv(timeout=timeout)
        except TimeoutError:
            return None
        except ConnectionClosed as exc:
            self.closed = True
            self.close_code = exc.rcvd.code if exc.rcvd else None
            return None
        frame: dict[str, Any] = json.loads(raw)
        self.frames.append(frame)
        if frame["type"] == "snapshot":
            self.snapshot = frame
            self.last_seq = frame["seq"]
        elif frame["type"] == "events":
            for env in frame["events"]:
                self.envelopes.append(env)
                self.last_seq = env["seq"]
        return frame

    def until_seq(self, seq: int, timeout: float = 15.0) -> None:
        deadline = Deadline(timeout, what=f"seq {seq}")
        while self.last_seq < seq:
            if self.closed:
                raise AssertionError(f"reached seq {self.last_seq}, wanted {seq}: the socket "
                                     f"closed with {self.close_code}")
            self.recv(deadline.left(last=f"seq {self.last_seq}"))

    def until_closed(self, timeout: float = 15.0) -> int | None:
        """Read (and keep) what comes until the server closes the socket; its close code."""
        deadline = Deadline(timeout, what="the server to close the socket")
        while not self.closed:
            self.recv(deadline.left())
        return self.close_code

    def drain(self, quiet: float = 0.3) -> None:
        while self.recv(quiet) is not None:
            pass

    def close(self) -> None:
        try:
            self.ws.close()
        except ConnectionClosed:
            pass


class TerminalView:
    """A browser's view of a web terminal (``WS /ws/terminal/{id}``) with the server's login:
    type into it, read its screen until a text appears, see how it was closed."""

    def __init__(self, server: ServerProcess, terminal_id: str) -> None:
        url = server.ws_url.replace("/ws/client", f"/ws/terminal/{terminal_id}")
        self.ws: ClientConnection = connect(f"{url}?cols=100&rows=30",
                                            additional_headers=server.cookie_header(),
                                            open_timeout=10)
        self.screen = b""
        self.ended: dict[str, Any] | None = None

    def type(self, text: str) -> None:
        self.ws.send(json.dumps({"type": "input", "data": text}))

    def until(self, needle: bytes, timeout: float = 20.0) -> None:
        deadline = Deadline(timeout, what=f"{needle!r} on the screen")
        while needle not in self.screen:
            try:
                frame = self.ws.recv(timeout=deadline.left(last=self.screen[-400:]))
            except TimeoutError:
                continue
            if isinstance(frame, bytes):
                self.screen += frame
            else:
                self.ended = json.loads(frame)

    def resize_and_see(self, cols: int, rows: int, timeout: float = 20.0) -> None:
        """Resize the view and wait until its shell sees the new size. tmux applies a resize on
        its own time: under load a shell once saw 100x17 (the rows changed, the columns not
        yet), so the shell is asked again until it answers with both."""
        self.ws.send(json.dumps({"type": "resize", "cols": cols, "rows": rows}))
        want = f"size-{cols}x{rows}".encode()
        deadline = Deadline(timeout, what=f"the shell to see {cols}x{rows}")
        while True:
            left = deadline.left(last=self.screen[-400:])  # (raises once the time is over)
            self.type("echo size-$(tput cols)x$(tput lines)\r")
            try:
                self.until(want, timeout=min(3.0, left))
                return
            except WaitTimedOut:
                continue

    def close_code(self, timeout: float = 20.0) -> int | None:
        deadline = Deadline(timeout, what="the view to be closed")
        while True:
            try:
                frame = self.ws.recv(timeout=deadline.left())
            except ConnectionClosed as exc:
                return exc.rcvd.code if exc.rcvd else None
            except TimeoutError:
                continue  # the deadline says so
            if isinstance(frame, str):
                self.ended = json.loads(frame)

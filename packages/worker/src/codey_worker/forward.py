"""The ports of a sandboxed process that has a network of its own, and a forward of one to
this machine's loopback on the user's click.

A process started with the session's network off runs in a network namespace of its own
(bwrap's ``--unshare-net``): a dev server in it that says "Serving HTTP on 0.0.0.0 port 8000"
is reachable from nothing outside its sandbox. Two things here:

* :func:`listening_ports`: the TCP ports it listens on, read from ``net/tcp`` and
  ``net/tcp6`` of its sandbox's PID 1 under ``/proc`` (that file shows the namespace of the
  process it belongs to), through a directory handle on ``/proc/<pid>`` opened once
  (:class:`ProcDir`): a handle on a process that has exited reads nothing, never another
  process that got its pid since.
* :class:`PortForward`: ``127.0.0.1:<host port>`` on this machine, relayed to the port inside
  the sandbox. A small helper process (:data:`_HELPER`, the Python already there, no site, no
  user files) joins the sandbox's user and network namespaces — only those two: it stays in
  the worker's mount and PID namespaces — and does one thing: for each connection the worker
  accepted, it connects a new socket to ``127.0.0.1:<port>`` (``::1`` for an IPv6-only
  listener) inside the namespace and hands the worker that socket over a Unix socket pair
  (``SCM_RIGHTS``). A socket keeps the namespace it was made in, so the worker then relays
  the bytes on its own loop; the helper never reads any.

Why this is sound (docs/security.md, "Forwarding a sandboxed port"):

* **Only on the user's click**, and only a port the process listens on at that moment, of a
  process of that session, running in bubblewrap with the network off. Nothing forwards a
  port by itself.
* **Loopback only.** The host side binds ``127.0.0.1`` (hard-coded: no field of the action
  says where); another machine cannot reach it. Every local user and every page open in a
  local browser can, as they can a dev server you start yourself without a sandbox.
* **One way.** Connections go from the host into the sandbox. Nothing in the sandbox gains a
  route out: its namespace keeps no interface but its own loopback, and the helper makes
  connections only to that port on that loopback, only when the worker asks.
* **The helper is out of the sandbox's reach.** It is not in the sandbox's PID namespace, so
  no process there can name it to signal or trace it; it also makes itself non-dumpable
  before it joins anything. It runs no code of the sandbox's and reads no byte of its
  traffic. An unprivileged worker may join those namespaces because it made them (bwrap
  made the user namespace as this user, and a user namespace's owner holds its
  capabilities): no privilege is added, and ``nsenter`` is not needed.
* **The right namespace.** The namespace is opened through the ``/proc/<pid>`` handle taken
  while the process ran, and checked against the inode bwrap reported for it
  (``--json-status-fd``), so a pid reused meanwhile cannot send the forward elsewhere.
* It ends with the process (or the session, or the worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import sys
from dataclasses import dataclass

from codey_worker.confine import ActionRefused

__all__ = ["MAX_CONNECTIONS", "PortForward", "ProcDir", "listening_ports", "parse_listening"]

log = logging.getLogger(__name__)

#: connections one forward relays at once (a browser opens six or so per host)
MAX_CONNECTIONS = 64
_LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's ``st`` column
_HELPER_START_S = 10.0

#: joins the sandbox's network namespace, then makes connected sockets for the worker
#: (argv: the namespace's fd, the control socket's fd; see the module docstring)
_HELPER = r"""
import ctypes, fcntl, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: not to be traced, not even by this user
net, ctl = int(sys.argv[1]), socket.socket(fileno=int(sys.argv[2]))
def fail(what, err):
    ctl.sendall(b"E" + ("%s: %s" % (what, os.strerror(err))).encode())
    sys.exit(1)
try:
    user = fcntl.ioctl(net, 0xB701)  # NS_GET_USERNS: the user namespace that owns it
except OSError as e:
    fail("NS_GET_USERNS", e.errno)
if os.fstat(user).st_ino != os.stat("/proc/self/ns/user").st_ino:
    if libc.setns(user, 0x10000000) != 0:  # CLONE_NEWUSER
        fail("joining the sandbox's user namespace", ctypes.get_errno())
os.close(user)
if libc.setns(net, 0x40000000) != 0:  # CLONE_NEWNET
    fail("joining the sandbox's network", ctypes.get_errno())
os.close(net)
ctl.sendall(b"R")
while True:
    req = ctl.recv(32)
    if not req:
        break
    six = req[:1] == b"6"
    s = socket.socket(socket.AF_INET6 if six else socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.connect(("::1" if six else "127.0.0.1", int(req[1:])))
    except OSError as e:
        ctl.sendall(b"E" + (e.strerror or str(e)).encode())
    else:
        socket.send_fds(ctl, [b"K"], [s.fileno()])
    s.close()
"""


def parse_listening(text: str) -> set[int]:
    """The ports of the listening sockets in a ``/proc/<pid>/net/tcp`` (or ``tcp6``) text."""
    ports: set[int] = set()
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 4 or fields[3] != _LISTEN:
            continue
        _, _, port = fields[1].rpartition(":")
        with contextlib.suppress(ValueError):
            ports.add(int(port, 16))
    return ports


@dataclass
class ProcDir:
    """A handle on ``/proc/<pid>`` of a sandbox's PID 1, taken while it runs and checked to
    be in the network namespace bwrap reported (``net_inode``)."""

    fd: int

    @classmethod
    def open(cls, pid: int, net_inode: int | None) -> ProcDir | None:
        """None when the process is gone, or is not the one in that namespace."""
        try:
            fd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            inode = os.stat("ns/net", dir_fd=fd).st_ino
        except OSError:
            inode = None
        if inode is None or (net_inode is not None and inode != net_inode):
            os.close(fd)
            return None
        return cls(fd)

    def read(self, name: str) -> str:
        """A file under it ("" once the process has exited)."""
        try:
            with open(name, encoding="ascii", errors="replace",
                      opener=lambda path, flags: os.open(path, flags, dir_fd=self.fd)) as f:
                return f.read()
        except OSError:
            return ""

    def open_net(self) -> int:
        """An fd of its network namespace (raises OSError once it has exited)."""
        return os.open("ns/net", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def listening_ports(proc: ProcDir) -> dict[int, int]:
    """``{port: 4 or 6}``: the TCP ports listened on in its network namespace, with the
    family to reach each by (4 when any IPv4 socket listens on it)."""
    out: dict[int, int] = {}
    for port in parse_listening(proc.read("net/tcp6")):
        out[port] = 6
    for port in parse_listening(proc.read("net/tcp")):
        out[port] = 4
    return out


class PortForward:
    """``127.0.0.1:host_port`` here → ``port`` in a sandbox's network namespace. Make one
    with :meth:`open`; :meth:`close` ends it (and every connection it relays)."""

    def __init__(self, port: int, family: int, ctl: socket.socket,
                 helper: asyncio.subprocess.Process) -> None:
        self.port = port
        self.family = family
        self.host = "127.0.0.1"
        self.host_port = 0
        self._ctl = ctl
        self._helper = helper
        self._server: asyncio.Server | None = None
        self._lock = asyncio.Lock()  # one request to the helper at a time
        self._relays: set[asyncio.Task[None]] = set()

    @classmethod
    async def open(cls, proc: ProcDir, port: int, family: int) -> PortForward:
        """Start the helper in the namespace and listen on the loopback: the same port
        number when it is free here (a URL the program printed then works as it is), else
        one the system picks. Raises ActionRefused when either cannot be done."""
        try:
            net = proc.open_net()
        except OSError:
            raise ActionRefused("process_ended", "the process has ended") from None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            helper = await asyncio.create_subprocess_exec(
                sys.executable, "-I", "-S", "-c", _HELPER, str(net), str(theirs.fileno()),
                pass_fds=(net, theirs.fileno()), stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        finally:
            os.close(net)
            theirs.close()
        ours.setblocking(False)
        forward = cls(port, family, ours, helper)
        try:
            answer = await asyncio.wait_for(
                asyncio.get_running_loop().sock_recv(ours, 4096), _HELPER_START_S)
            if answer != b"R":
                reason = answer[1:].decode(errors="replace") or "it exited"
                raise ActionRefused("forward_failed",
                                    f"cannot enter the sandbox's network ({reason})")
            forward._server = await _listen(forward._relay, forward.host, port)
        except BaseException:
            await forward.close()
            raise
        forward.host_port = forward._server.sockets[0].getsockname()[1]
        return forward

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._relays):
            task.cancel()
        await asyncio.gather(*self._relays, return_exceptions=True)
        self._ctl.close()
        if self._helper.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._helper.kill()
        await self._helper.wait()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is None or len(self._relays) >= MAX_CONNECTIONS:
            writer.close()
            return
        self._relays.add(task)
        try:
            inside = await self._connect_inside()
            if inside is None:
                return
            in_reader, in_writer = await asyncio.open_connection(sock=inside)
            try:
                await asyncio.gather(_pump(reader, in_writer), _pump(in_reader, writer))
            finally:
                in_writer.close()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            self._relays.discard(task)

    async def _connect_inside(self) -> socket.socket | None:
        """A socket connected to the port inside (None: refused, or the helper is gone)."""
        loop = asyncio.get_running_loop()
        async with self._lock:
            try:
                await loop.sock_sendall(self._ctl, f"{self.family}{self.port}".encode())
                data, fds = await _recv_fds(loop, self._ctl)
            except OSError:
                return None
        if data != b"K" or not fds:
            for fd in fds:
                os.close(fd)
            log.debug("forward of port %d: %s", self.port, data[1:].decode(errors="replace"))
            return None
        return socket.socket(fileno=fds[0])


async def _listen(handler: object, host: str, port: int) -> asyncio.Server:
    try:
        return await asyncio.start_server(handler, host, port)  # type: ignore[arg-type]
    except OSError as exc:
        if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
            raise
    return await asyncio.start_server(handler, host, 0)  # type: ignore[arg-type]


async def _recv_fds(loop: asyncio.AbstractEventLoop,
                    sock: socket.socket) -> tuple[bytes, list[int]]:
    """One message and the descriptors that came with it, from a non-blocking socket."""
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, 4096, 1)
            return data, fds
        except BlockingIOError:
            ready: asyncio.Future[None] = loop.create_future()
            loop.add_reader(sock.fileno(), _set_ready, ready)
            try:
                await ready
            finally:
                loop.remove_reader(sock.fileno())


def _set_ready(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(64 * 1024):
            writer.write(data)
            await writer.drain()
    finally:
        if writer.can_write_eof():
            with contextlib.suppress(OSError):
                writer.write_eof()

"""Every WebSocket close code either end uses, once (docs/protocol.md, "Close codes").

The 4000 range is ours; the numbers echo HTTP where one fits (4401 ~ 401, 4426 ~ 426). The web
client (``web/socket.js``, ``web/views/terminal.js``) reads the same numbers.
"""

from __future__ import annotations

__all__ = [
    "BAD_FIRST_FRAME", "FORBIDDEN", "GOING_AWAY", "LAGGING", "MACHINE_OFFLINE", "NO_TERMINAL",
    "REPLACED", "REVOKED", "SILENT", "TOO_LARGE", "UNAUTHORIZED", "UPGRADE_REQUIRED",
]

#: the server is shutting down; reconnect later (after a ``shutdown`` frame to browsers)
GOING_AWAY = 1001
#: a frame over the 1 MiB cap
TOO_LARGE = 1009
#: browser: fell behind, or read nothing; resume with ``after_seq`` (after ``resync``: 0)
LAGGING = 4008
#: browser: the first frame was not ``subscribe``; worker: the frame after ``welcome`` was
#: not ``hello``
BAD_FIRST_FRAME = 4400
#: browser: not logged in (or logged out); worker: unknown, bad signature, clock skew, slow
UNAUTHORIZED = 4401
#: worker: revoked by the user; it exits and must be paired again
REVOKED = 4403
#: browser: refused for this login (the same number as REVOKED, on the other socket)
FORBIDDEN = 4403
#: terminal view: no such terminal, or it was closed
NO_TERMINAL = 4404
#: worker: nothing received for three heartbeats; it reconnects
SILENT = 4408
#: worker: a newer connection with the same identity took over; the old process exits 0
REPLACED = 4409
#: worker: it speaks another major protocol version; upgrade one side (the reason says which)
UPGRADE_REQUIRED = 4426
#: terminal view: its machine is not connected
MACHINE_OFFLINE = 4503

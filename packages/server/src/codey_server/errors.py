"""The one root exception of ``codey_server``.

    ServerError
      ├── CommandRejected        (decide.py) a browser command that cannot be carried out
      ├── SubscriberOverflow     (eventlog.py) a subscriber fell too far behind
      ├── LogClosed              (eventlog.py) the log is closed
      ├── LeaseLost              (errors.py) a write fenced by a lease this replica no longer holds
      ├── AppendConflict         (errors.py) an append whose session moved on since its decision
      ├── PairingError           (workers/pair_store.py) a pairing call that cannot be carried out
      ├── ModelError             (agent/errors.py) a model call failed after its retries
      ├── AuthError              (auth/service.py) a provider login call that cannot be done
      ├── OAuthFailed            (auth/oauth.py) an OAuth/OIDC step failed
      ├── WheelsUnavailable      (downloads.py) no worker wheels to hand out under /dl/
      ├── SharedStateError       (cluster/errors.py) the replicas' shared state
      │     └── SecretKeyError   no secret key, a malformed one, or a row sealed with another
      └── ConfigError            (settings.py) bad settings
"""

from __future__ import annotations

from typing import ClassVar


class ServerError(Exception):
    """Root of every exception raised by codey_server on purpose."""

    #: a ``code`` this error carries that the HTTP layer does not know comes from an upstream
    #: service (an identity provider's ``invalid_grant``): answered 502, not 400
    upstream_codes: ClassVar[bool] = False


class SubscriberOverflow(ServerError):
    """A subscriber's bounded queue overflowed; it must resume from the log with after_seq."""


class LogClosed(ServerError):
    """The event log was closed."""


class LeaseLost(ServerError):
    """A write carried a :class:`~codey_server.core.leases.Fence` that is no longer current:
    another replica took the lease over (its epoch moved on), or the log has no leases to
    check it against. Nothing of that write was stored; the runner that made it must stop."""

    def __init__(self, lease: str, why: str = "another replica holds it now") -> None:
        super().__init__(f"lost the lease {lease}: {why}")
        self.lease = lease


class AppendConflict(ServerError):
    """An append decided on the log as of seq ``expected`` touches a session that has an
    event after it (at ``seq``): the session moved on since the decision. Nothing of that
    append was stored and it used no seq; the decider decides again on the new state
    (:meth:`~codey_server.core.engine.Engine.submit` does)."""

    def __init__(self, session_id: str, seq: int, expected: int) -> None:
        super().__init__(f"session {session_id} moved on: its event {seq} came after "
                         f"{expected}, the seq this append was decided on")
        self.session_id = session_id
        self.seq = seq
        self.expected = expected


class ConfigError(ServerError):
    """Settings that cannot work (e.g. binding beyond loopback without auth)."""

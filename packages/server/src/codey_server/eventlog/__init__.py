"""The event log: every state change in one gapless sequence, behind one interface.

    base.py       the ``EventLog`` interface, ``Subscription``; the guarantees every backend gives
    memory.py     ``MemoryEventLog``: in process memory (tests, throwaway servers)
    sqlite.py     ``SqliteEventLog``: one SQLite file (WAL), group commit — the default
    postgres.py   ``PostgresEventLog``: PostgreSQL, for replicas (psycopg: imported only when used)
    retention.py  how long finished sessions' events are kept
    contract.py   the contract suite every backend's tests subclass (test code: needs pytest)
"""

from codey_server.errors import LogClosed, SubscriberOverflow
from codey_server.eventlog.base import EventLog, Fence, Subscription
from codey_server.eventlog.memory import MemoryEventLog
from codey_server.eventlog.sqlite import SqliteEventLog

__all__ = ["EventLog", "Fence", "LogClosed", "MemoryEventLog", "SqliteEventLog",
           "SubscriberOverflow", "Subscription"]

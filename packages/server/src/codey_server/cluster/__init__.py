"""Several servers (replicas) on one PostgreSQL database: what they run on together.

    db.py         SharedDb: the state the replicas share as rows (the pool, the tables, row
                  locks and named locks, notifications on ``codey_shared``: a delete told to
                  the other replicas at once)
    crypto.py     SecretKey: AES-256-GCM sealing of provider credentials and a pasted Telegram
                  bot token, an HMAC for short secrets, the key from ``$CODEY_SECRET_KEY`` or
                  ``secret_key_file``
    upgrade.py    the one-time import of what an older version kept in files
    replicas.py   Cluster (heartbeats, leases, routed actions, the janitor)
    terminals.py  TerminalRelay: web-terminal frames between replicas

Each side store keeps its port and its two backends next to its feature: the file (or memory)
backend a single server on SQLite uses, the PostgreSQL backend every replica on one database
uses (rows, read on every check, so a delete on one replica holds on all of them once its
request has answered):

    http/access_store.py     the access token, browser sessions
    mcp/tokens.py            MCP tokens
    workers/keys.py          worker keys
    workers/pair_store.py    pair requests and their polls
    providers/store.py       provider credentials (sealed with crypto.py), pending OAuth logins
    blobs/store.py           files sent with prompts, by content hash
    channels/telegram_store.py  a pasted Telegram bot token (sealed), the pairing code (HMAC)

Which backends a server uses, and whether it joins a cluster, is chosen once, at start, by
:mod:`codey_server.deployment`. Only the deployment builds ``replicas.py`` and
``terminals.py`` (an import contract says so); a store's PostgreSQL backend imports ``db.py``
and ``crypto.py``. One server on SQLite never imports psycopg.

Errors (all :class:`~codey_server.errors.ServerError`)::

    SharedStateError            the replicas' shared state
      └── SecretKeyError        no key, a malformed key, or a row sealed with another key
"""

from codey_server.cluster.errors import SecretKeyError, SharedStateError

__all__ = ["SecretKeyError", "SharedStateError"]

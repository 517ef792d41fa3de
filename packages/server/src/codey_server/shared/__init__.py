"""State the replicas share as rows in PostgreSQL, and what keeps its secrets sealed.

    db.py      SharedDb: the pool, the tables, row locks and named locks, notifications on
               ``codey_shared`` (a delete told to the other replicas at once)
    crypto.py  SecretKey: AES-256-GCM sealing of provider credentials, the key from
               ``$CODEY_SECRET_KEY`` or ``secret_key_file``

Each store keeps its port and its two backends next to its feature: the file backend a single
server on SQLite uses (its data dir's files, as before), the PostgreSQL backend every replica
on one database uses (rows, read on every check, so a delete on one replica holds on all of
them once its request has answered):

    http/access_store.py     the access token, browser sessions
    mcp/tokens.py            MCP tokens
    workers/keys.py          worker keys
    workers/pair_store.py    pair requests and their polls
    providers/store.py       provider credentials (sealed with crypto.py), pending OAuth logins
    blobs/store.py           files sent with prompts, by content hash

Only built when ``--database-url`` is set; one server on SQLite never imports psycopg.

Errors (all :class:`~codey_server.errors.ServerError`)::

    SharedStateError            the root of this package
      └── SecretKeyError        no key, a malformed key, or a row sealed with another key
"""

from codey_server.shared.errors import SecretKeyError, SharedStateError

__all__ = ["SecretKeyError", "SharedStateError"]

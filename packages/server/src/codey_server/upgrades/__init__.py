"""Upgrades: the data's format, checked at start, and the backups that make a migration safe.

    plan.py        pure: the formats, the list of migrations, and ``plan(found, code) ->
                   Plan | Refusal``
    data.py        the format's markers (``format.json``, the table ``codey_format``) and the
                   log's database as the upgrades see it (SQLite or PostgreSQL)
    migrations.py  what each migration does to the data (idempotent steps)
    backup.py      ``codey-server backup`` / ``restore``, and the backup made before a
                   migration
    startup.py     the driver: ``prepare(settings)`` before the server opens the data,
                   ``announce(engine, data_dir)`` once it runs
    decide.py, fold.py   the upgrade's notice as an event, and its dismissal
    errors.py      ``UpgradeError`` and what derives from it

A feature like the others for its events (``features.py`` lists it); the rest runs before
the services exist, from the CLI.
"""

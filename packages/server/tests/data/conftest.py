"""Data the tests read, never tests: an old release's worker home holds the projects its
sessions worked in, with their own ``test_*.py`` files (``tests/data/upgrade/``)."""

collect_ignore_glob = ["*"]

"""Checkpoints (issue 38): each turn's workdir, kept by the worker before the turn's first
change; listing them, previewing and restoring one, one file of one, the change between two."""

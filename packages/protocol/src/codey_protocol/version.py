"""The release of every Codey package: protocol, server, worker and test kit.

One number, here, for all four: each package's ``pyproject.toml`` reads it (hatchling's
``[tool.hatch.version]``), and ``codey-server --version``, ``codey-worker --version`` and the
web client's About print it. It rises with each change of the data format or of the protocol
(docs/CHANGELOG.md says what each release does to the data).
"""

__version__ = "0.2.0"

"""codey_server: the Codey server (``codey-server``; :mod:`codey_server.cli`)."""

# every Codey package has one version, kept in the protocol package
from codey_protocol.version import __version__

__all__ = ["__version__"]

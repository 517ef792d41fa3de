"""codey_server."""

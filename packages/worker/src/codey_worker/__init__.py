"""codey_worker."""

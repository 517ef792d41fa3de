"""blobs."""

"""browsers."""

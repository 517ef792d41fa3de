"""codey_testkit."""

"""Test code shipped with the server for other backends' suites (it needs pytest)."""

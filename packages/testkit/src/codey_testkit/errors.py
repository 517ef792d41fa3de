"""Errors raised by codey_testkit.

TestkitError is the root of every exception this package raises on purpose::

    TestkitError
    ├── ScriptError            a model-server script that does not parse or validate
    ├── SampleError            samples.sample met a type it cannot build a value of
    └── ProcessError           a ManagedProcess that did not behave
        ├── ProcessExitedError     it exited while we waited for a line
        └── ProcessTimeoutError    the line did not appear in time (also a TimeoutError)
"""


class TestkitError(Exception):
    """Root."""

    __test__ = False  # pytest: not a test class despite the name


class ScriptError(TestkitError):
    """A model-server script is malformed; the message names the offending path."""


class SampleError(TestkitError, TypeError):
    """No sample value for this type: teach ``codey_testkit.samples.sample`` the new type."""


class ProcessError(TestkitError):
    """A managed process failed to start, exited early or did not print what we waited for."""


class ProcessExitedError(ProcessError):
    """The process exited before printing the awaited line; the message holds the log tail."""


class ProcessTimeoutError(ProcessError, TimeoutError):
    """The awaited line did not appear within the timeout; the message holds the log tail."""

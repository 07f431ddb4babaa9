"""models: the structured result of a sandbox run (the output schema of both tools).

Owns the shape only.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class RunResult(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)

    exit_code: int
    """The process's exit status; negative when a signal ended it (-9 SIGKILL, -24 SIGXCPU).

    bubblewrap reports a command ended by signal N as status 128 + N, as a shell does, so a
    command that itself exits with 129 to 192 reads as a signal too.
    """
    signal: str | None
    """Name of the signal that ended the process, e.g. 'SIGKILL' after a timeout; null if it exited."""
    stdout: str
    stderr: str
    timed_out: bool
    """True when the wall-time timeout ran out and the process group was killed."""
    truncated: bool
    """True when stdout or stderr was longer than the server keeps; the middle was cut."""
    duration_ms: int
    """Wall time from start until the process ended or was killed."""


class TestFailure(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)

    name: str
    """The test, as `module.Class.test_name` (`classname.name` of the JUnit record)."""
    kind: str
    """`failure` (an assertion failed) or `error` (the test could not run to its assertions)."""
    message: str
    expected: str | None
    """The right side of a failed `assert actual == expected`; null when the message has another form."""
    actual: str | None
    location: str | None
    """`file:line` where the failure was raised, relative to the directory the tests ran in."""
    trace: str
    """The end of the traceback."""


class TestReport(BaseModel):
    model_config = ConfigDict(use_attribute_docstrings=True)

    exit_code: int
    """pytest's exit status: 0 all passed, 1 some failed, 2 interrupted, 4 usage error, 5 no tests."""
    passed: int
    failed: int
    errors: int
    skipped: int
    failures: list[TestFailure]
    """One record per failed or erroring test, in the order the runner reported them."""
    output: str
    """The runner's console output, cut in the middle past the server's limit."""
    timed_out: bool
    duration_ms: int

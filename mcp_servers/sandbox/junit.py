"""junit: read a test runner's JUnit XML into structured results the repair phase can act on.

A test result is (passed, failed, failures), each failure with its name, expected
and actual values, trace and source location. The XML comes from code the sandbox ran, so it is
parsed with defusedxml (no entity expansion, no external references) before junitparser reads it.

Expected and actual come from pytest's assertion message (`assert ACTUAL == EXPECTED`, pytest's
convention) when it has that form; the location is the last `file:line:` of the failure's
traceback, where the failing assertion or raise is — not the test function's first line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from defusedxml import ElementTree
from junitparser import Error, Failure, JUnitXml, Skipped

from boundloop.mcp_servers.sandbox.models import TestFailure

_COMPARISON = re.compile(r"^(?:AssertionError: )?assert (?P<actual>.+?) == (?P<expected>.+)$")
_LOCATION = re.compile(r"^(?P<file>[^\s:][^:\n]*\.py):(?P<line>\d+): ", re.MULTILINE)
MAX_TRACE_CHARS = 2_000


@dataclass
class Counts:
    """Totals and failures of one JUnit report."""

    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    failures: list[TestFailure] = field(default_factory=list)


def parse_junit(xml: str) -> Counts:
    """The counts and failures of a JUnit XML document; raises ValueError when it is not one."""
    try:
        report = JUnitXml.fromroot(ElementTree.fromstring(xml))
    except Exception as error:  # defusedxml's refusals and expat's syntax errors alike
        raise ValueError(f"the test runner's JUnit XML could not be read: {error}") from error
    counts = Counts()
    for suite in report:
        for case in suite:
            outcomes = list(case.result)
            if not outcomes:
                counts.passed += 1
            elif any(isinstance(outcome, Skipped) for outcome in outcomes):
                counts.skipped += 1
            else:
                outcome = next(o for o in outcomes if isinstance(o, (Failure, Error)))
                if isinstance(outcome, Error):
                    counts.errors += 1
                else:
                    counts.failed += 1
                counts.failures.append(_failure(case, outcome))
    return counts


def _failure(case, outcome: Failure | Error) -> TestFailure:
    message = (outcome.message or "").strip()
    trace = outcome.text or ""
    comparison = _COMPARISON.match(message.splitlines()[0]) if message else None
    locations = list(_LOCATION.finditer(trace))
    file = case._elem.get("file")
    line = case._elem.get("line")
    if locations:
        location = f"{locations[-1]['file']}:{locations[-1]['line']}"
    elif file:
        location = f"{file}:{int(line) + 1}" if line and line.isdigit() else file  # xunit1 lines count from 0
    else:
        location = None
    return TestFailure(
        name=f"{case.classname}.{case.name}" if case.classname else case.name,
        kind="error" if isinstance(outcome, Error) else "failure",
        message=message[:500],
        expected=comparison["expected"] if comparison else None,
        actual=comparison["actual"] if comparison else None,
        location=location,
        trace=trace[-MAX_TRACE_CHARS:],
    )

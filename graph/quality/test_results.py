"""test_results: a test check's structured report (the sandbox's `run_tests`) as verification data.

A report is recognised by its shape — counts and a `failures` list — whichever tool produced it,
so a third-party test tool that returns the same fields is read the same way. Each failing test
becomes its own verification failure carrying name, expected, actual and `file:line`, so the
repair prompt can point at the line instead of quoting console output.
"""

from __future__ import annotations

import json
from typing import Any

COUNTS = ("passed", "failed", "errors")


def test_report(output: str) -> dict[str, Any] | None:
    """The structured test report in a tool's output, or None when it holds none."""
    try:
        report = json.loads(output)
    except json.JSONDecodeError:
        return None
    if not isinstance(report, dict) or not isinstance(report.get("failures"), list):
        return None
    if not all(isinstance(report.get(key), int) and report[key] >= 0 for key in COUNTS):
        return None
    return report


def add_tests(totals: dict[str, int] | None, report: dict[str, Any]) -> dict[str, int]:
    """Running totals over the run's test checks."""
    totals = dict(totals or {key: 0 for key in COUNTS})
    for key in COUNTS:
        totals[key] += report[key]
    return totals


def pass_rate(totals: dict[str, int] | None) -> float | None:
    """Share of tests that passed; None when no test ran."""
    if not totals:
        return None
    ran = sum(totals[key] for key in COUNTS)
    return totals["passed"] / ran if ran else None


def test_failures(check: dict[str, Any], report: dict[str, Any]) -> list[dict[str, Any]]:
    """One verification failure per failing test; none (the exit code speaks) when the report lists none."""
    failures = []
    for failure in report["failures"]:
        if not isinstance(failure, dict):
            continue
        name, location = str(failure.get("name", "a test")), failure.get("location")
        reason = f"{name} failed" + (f" at {location}" if location else "")
        if failure.get("expected") is not None:
            reason += f": expected {failure['expected']}, got {failure.get('actual')}"
        elif failure.get("message"):
            reason += f": {str(failure['message'])[:300]}"
        failures.append({"criterion": check["name"], "reason": reason, "test": name, "location": location,
                         "expected": failure.get("expected"), "actual": failure.get("actual")})
    return failures

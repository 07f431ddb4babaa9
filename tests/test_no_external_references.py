"""Product code, tests and shipped documents state their rules themselves: none cites a document
that does not ship with the project (the design seeds, a design or style guide, working notes).

A citation such as "seed 001", "DESIGN §4" or "notes/mcp.md" sends a reader to a text they do not
have; the rule it points at belongs in the sentence instead.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CITATION = re.compile(
    r"\bseeds?\s*0\d\d\b"  # a numbered seed document
    r"|\bseeds/"  # the seeds folder
    r"|\b(?:DESIGN|STYLE)(?:\.md\b|\s*§)"  # the design or style guide, by file or by section
    r"|§\s*\d"  # a numbered section of any of them
    r"|\bissues?\s+\d+\b"  # the tracker's issues: the text states the rule, the commit says where it came from
    r"|\bnotes/(?!meeting\.md)[\w.-]+\.md\b",  # working notes (notes/meeting.md is the demo workspace's own file)
    re.IGNORECASE,
)
TEXT_SUFFIXES = {".py", ".md", ".json", ".toml", ".sh", ".html", ".css", ".txt", ".cfg", ".ini", ".yaml", ".yml"}


def shipped_files() -> list[Path]:
    """Every file of the repository that git tracks or would track (new files included), as text."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    files = [REPO / name for name in listed if (REPO / name).suffix in TEXT_SUFFIXES or (REPO / name).name == "run"]
    return [path for path in files if path.is_file()]


def citations(text: str) -> list[str]:
    """`line: match` for each citation of an unshipped document in `text`."""
    return [f"{number}: {match.group(0)}" for number, line in enumerate(text.splitlines(), 1) for match in CITATION.finditer(line)]


@pytest.mark.parametrize(
    "line",
    [
        "Kept small on purpose (DESIGN §3): payloads live elsewhere.",
        '"""status: the terminal codes of seed 001."""',
        "# Model-facing texts (STYLE §6)",
        "see notes/scale-out.md for the listener",
        "targeted re-planning (Seed 000 §15.3.3)",
        "Read DESIGN.md first.",
        "Bounded context on long runs (issue 13, items 1-4)",
    ],
)
def test_a_citation_of_an_unshipped_document_is_found(line: str) -> None:
    """The pattern catches each form of citation, so the scan below can fail."""
    assert citations(line)


def test_the_demo_workspace_file_is_not_a_citation() -> None:
    assert citations("Summarize notes/meeting.md into summary.md; the design seeds the plan.") == []


def test_no_shipped_file_cites_a_document_that_does_not_ship() -> None:
    """Product code, tests and documents say the rule, not where an unshipped document says it."""
    files = [path for path in shipped_files() if path != Path(__file__).resolve()]
    assert len(files) > 100, "the scan found too few files to be looking at the repository"
    found = {path.relative_to(REPO).as_posix(): hits for path in files if (hits := citations(path.read_text(errors="replace")))}
    assert found == {}

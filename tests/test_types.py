"""graph/ and nodes/ type-check: mypy, configured in pyproject.toml, reports no error.

mypy runs as `python -m mypy` from the repository root, so it reads `[tool.mypy]` there (the
packages it checks, tests/.mypy_path for the package mapping, the cache in .mypy_cache). With a warm
cache a run takes a few seconds; a cold one about a minute and a half on a loaded 2-core machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_graph_and_nodes_type_check_without_errors() -> None:
    pytest.importorskip("mypy", reason="mypy comes with the dev extra: pip install -e '.[dev]'")
    checked = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    report = checked.stdout + checked.stderr
    assert checked.returncode == 0, f"mypy found errors:\n{report}"
    assert "Success: no issues found" in report, report

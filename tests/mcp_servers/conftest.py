"""Fixtures for the MCP server tests. Servers themselves are started inside each test with `launch`."""

from __future__ import annotations

import pytest


@pytest.fixture
def records_db_url(db_url: str) -> str:
    """The record store's database: this test's fresh database (see tests/conftest.py)."""
    return db_url

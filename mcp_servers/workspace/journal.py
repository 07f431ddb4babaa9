"""journal: what a keyed write promised, kept on disk so a replay after a crash answers the same.

Owns one JSON file per idempotency key in a directory outside the workspace root (the tools can
never reach it). Never touches workspace files; the write_file tool decides what to store.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


class Journal:
    def __init__(self, directory: Path) -> None:
        self._directory = directory

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            entry: dict[str, Any] = json.loads(self._file(key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return entry

    def put(self, key: str, entry: dict[str, Any]) -> None:
        """Store `entry` under `key`, atomically: a reader sees the old entry or the new, never half."""
        self._directory.mkdir(parents=True, exist_ok=True, mode=0o700)  # entries hold file contents
        fd, temporary = tempfile.mkstemp(dir=self._directory, suffix=".tmp")
        with open(fd, "w", encoding="utf-8") as file:
            json.dump(entry, file)
        os.replace(temporary, self._file(key))

    def _file(self, key: str) -> Path:
        # Keys are caller text; hashing makes any key a safe file name.
        return self._directory / f"{hashlib.sha256(key.encode()).hexdigest()}.json"


def default_directory(root: Path) -> Path:
    """A per-root journal directory under the system temp dir: it survives a server crash, not a reboot."""
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / "boundloop-workspace-journal" / digest

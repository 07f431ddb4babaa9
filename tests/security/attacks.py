"""attacks: the security suite's attack families and the recorder its tests report to.

Each family names the file that tries it and what one attempt is; the recorder accepts only these
names, and the suite's table (`python -m tests.security`) lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple


class Family(NamedTuple):
    file: str
    attempt: str
    """What one attempt is; an escape (or bypass) is an attempt that got through."""


FAMILIES: dict[str, Family] = {
    "path-escape": Family("test_path_escape.py", "a hostile path given to one workspace tool"),
    "symlink-dotdot": Family("test_one_resolution.py", "a '..' after a symlink, through gateway+server, gateway or server"),
    "path-arguments": Family("test_path_arguments.py", "a denied path in a third-party argument shape and spelling"),
    "race": Family("test_race.py", "a workspace call made while its directory is swapped for a symlink"),
    "sandbox-escape": Family("test_sandbox_escape.py", "one way out of the sandbox a snippet tries"),
    "sandbox-hiding": Family("test_sandbox_hiding.py", "one probe of a denied path from inside the sandbox"),
    "secret-leak": Family("test_secrets.py", "one secret searched for in one place a run leaves"),
    "secret-encoding": Family("test_secret_encodings.py", "one encoding of one configured secret"),
    "prompt-injection": Family("test_injection.py", "one call an injected tool result asks for"),
    "policy-bypass": Family("test_policy_bypass.py", "one way around a path, collection or command rule"),
    "tool-pinning": Family("test_pinning.py", "one call to a tool its server changed after intake"),
    "untrusted-annotations": Family("test_untrusted_annotations.py", "one call whose untrusted claim would relax a guard"),
    "task-intake": Family("test_task_check.py", "one task text that asks for a denied path or an escape"),
    "task-authority": Family("test_authority.py", "one side effect outside the task's targets that an injected result asks for, per profile and mode"),
}


@dataclass(frozen=True)
class Attacks:
    """The session's tally (family → [attempts, escapes]), as seen from one test file."""

    tally: dict[str, list[int]]
    file: str

    def record(self, family: str, *, attempts: int, escapes: int = 0) -> None:
        """Count `attempts` distinct attacks of `family`, `escapes` of which got through."""
        if FAMILIES[family].file != self.file:
            raise ValueError(f"family {family!r} belongs to {FAMILIES[family].file}, not {self.file}")
        counts = self.tally.setdefault(family, [0, 0])
        counts[0] += attempts
        counts[1] += escapes

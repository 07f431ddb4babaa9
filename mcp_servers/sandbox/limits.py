"""limits: what one sandbox run may use, set once per server from its flags.

Owns the defaults and how they reach the jail. Never enforces anything itself: the kernel does,
through the rlimits `jail` sets, and the runner does for wall time and output size.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    cpu_s: int = 10
    """CPU seconds per run; at the limit the child gets SIGXCPU, and SIGKILL a second later."""
    memory_mb: int = 512
    """Address space per process (RLIMIT_AS), in MiB; allocations beyond it fail."""
    file_size_mb: int = 16
    """Largest file a run may write (RLIMIT_FSIZE), in MiB; longer writes fail."""
    output_chars: int = 20_000
    """Characters kept of stdout and of stderr each; beyond it the middle is cut."""
    max_timeout_s: float = 120
    """Largest wall-time timeout a call may ask for."""
    allow_network: bool = False
    """Run children in the host's network instead of an empty network namespace."""

    def jail_flags(self) -> list[str]:
        flags = [
            f"--cpu-s={self.cpu_s}",
            f"--memory-bytes={self.memory_mb * 2**20}",
            f"--file-size-bytes={self.file_size_mb * 2**20}",
        ]
        return [*flags, "--allow-network"] if self.allow_network else flags

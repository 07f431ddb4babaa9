"""limits: what one sandbox run may use, set once per server from its flags.

Owns the defaults and how they reach the child. Never enforces anything itself: the kernel does,
through the rlimits `prlimit` sets inside the sandbox, and the runner does for wall time and output.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    cpu_s: int = 10
    """CPU seconds per process; at the limit it gets SIGXCPU, and SIGKILL a second later."""
    memory_mb: int = 512
    """Address space per process (RLIMIT_AS), in MiB; allocations beyond it fail."""
    file_size_mb: int = 16
    """Largest file a run may write (RLIMIT_FSIZE), in MiB; longer writes fail."""
    max_processes: int = 64
    """Processes and threads one run may have at once (RLIMIT_NPROC, counted in its own user namespace)."""
    output_chars: int = 20_000
    """Characters kept of stdout and of stderr each; beyond it the middle is cut."""
    max_timeout_s: float = 120
    """Largest wall-time timeout a call may ask for."""
    allow_network: bool = False
    """Give children the host's network instead of an empty network namespace."""

    def prlimit_flags(self) -> list[str]:
        memory, file_size = self.memory_mb * 2**20, self.file_size_mb * 2**20
        return [
            f"--nproc={self.max_processes}:{self.max_processes}",
            f"--cpu={self.cpu_s}:{self.cpu_s + 1}",
            f"--as={memory}:{memory}",
            f"--fsize={file_size}:{file_size}",
            "--core=0:0",
        ]

"""`python -m boundloop.mcp_servers.sandbox --root DIR [limits] [--allow-network] [--hide GLOB]... [--http --host H --port N]`.

Serves the sandbox tools; every limit has a flag with a safe default.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mcp.server import MCPServer

from boundloop.mcp_servers._serve import positive, serve
from boundloop.mcp_servers.sandbox.limits import Limits
from boundloop.mcp_servers.sandbox.server import build_server


def _build(args: argparse.Namespace) -> MCPServer:
    limits = Limits(
        cpu_s=args.cpu_s,
        memory_mb=args.memory_mb,
        file_size_mb=args.file_size_mb,
        max_processes=args.max_processes,
        output_chars=args.output_chars,
        max_timeout_s=args.max_timeout_s,
        allow_network=args.allow_network,
    )
    return build_server(args.root, limits, tuple(args.hide))


def main() -> None:
    defaults = Limits()
    parser = argparse.ArgumentParser(prog="python -m boundloop.mcp_servers.sandbox", description=__doc__)
    parser.add_argument("--root", type=Path, required=True, help="working directory of every run (created if missing)")
    parser.add_argument(
        "--cpu-s", type=positive(int), default=defaults.cpu_s, help="CPU seconds per run (default: %(default)s)"
    )
    parser.add_argument(
        "--memory-mb",
        type=positive(int),
        default=defaults.memory_mb,
        help="address space per process, MiB (default: %(default)s)",
    )
    parser.add_argument(
        "--file-size-mb",
        type=positive(int),
        default=defaults.file_size_mb,
        help="largest file a run may write, MiB (default: %(default)s)",
    )
    parser.add_argument(
        "--max-processes",
        type=positive(int),
        default=defaults.max_processes,
        help="processes and threads one run may have at once (default: %(default)s)",
    )
    parser.add_argument(
        "--output-chars",
        type=positive(int),
        default=defaults.output_chars,
        help="characters kept of stdout and of stderr each (default: %(default)s)",
    )
    parser.add_argument(
        "--max-timeout-s",
        type=positive(float),
        default=defaults.max_timeout_s,
        help="largest wall-time timeout a call may ask for (default: %(default)s)",
    )
    parser.add_argument(
        "--allow-network",
        action="store_true",
        help="let children use the host's network (default: an empty network namespace)",
    )
    parser.add_argument(
        "--hide",
        action="append",
        default=[],
        metavar="GLOB",
        help="absolute glob over real paths (`*` crosses '/', `dir/**` names dir too); what it names under the "
        "root is masked in every run (repeatable; the gateway passes its policy's deny globs)",
    )
    serve(parser, _build, default_port=8703)


if __name__ == "__main__":
    main()

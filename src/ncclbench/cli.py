"""Command-line entry point (being wired up by the integrator)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    print("ncclbench: command line not wired yet", file=sys.stderr)
    return 1

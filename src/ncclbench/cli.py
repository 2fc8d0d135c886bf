"""Console entry point (`ncclbench = ncclbench.cli:main`): the command layer
in `ncclbench.commands` does the work; see its docstring for the commands and
how to add one."""

from __future__ import annotations

from .commands import main

__all__ = ["main"]

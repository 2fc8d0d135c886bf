"""A progress bar for long sweeps, on stderr, only when stderr is a terminal.

A full 8 B..8 GiB sweep takes minutes and prints nothing useful for long
stretches at the large sizes.  `ProgressReporter` follows the harness'
Reporter protocol; it counts the rows it expects from the options and moves
one step per row.  Logs and pipes never see it (stderr not a TTY), and
stdout, where the table goes, is never touched unless it is the same
terminal (then rich prints the table lines above the bar).
"""

from __future__ import annotations

import itertools
import sys
from typing import TextIO

from ..collectives import COLLECTIVES
from ..config import BenchOptions
from ..harness.sweep import sweep_sizes as harness_sweep
from ..results import ResultRow, RunInfo, RunSummary
from ..store.stats import human_size

_MAX_SIZES = 1_000_000  # beyond this, show no total rather than count forever


def sweep_sizes(opts: BenchOptions) -> list[int]:
    """Requested sizes of one sweep (the harness' own rule, spec §2.7); empty when
    the sweep would not end or the options are invalid for it."""
    try:
        sizes = list(itertools.islice(
            harness_sweep(opts.min_bytes, opts.max_bytes, opts.step_bytes, opts.step_factor),
            _MAX_SIZES + 1))
    except ValueError:  # a zero size or step never advances
        return []
    return [] if len(sizes) > _MAX_SIZES else sizes


def expected_rows(opts: BenchOptions, nranks: int) -> int | None:
    """Rows the run will print, or None when unknown (-N 0 runs forever)."""
    if opts.run_cycles <= 0:
        return None
    sizes = sweep_sizes(opts)
    if not sizes:
        return None
    coll = COLLECTIVES.get(opts.collective)
    ops = len(opts.ops) if coll is not None and coll.reduces else 1
    roots = nranks if (coll is not None and coll.rooted and opts.root == -1) else 1
    return len(sizes) * len(opts.datatypes) * ops * roots * opts.run_cycles


class ProgressReporter:
    def __init__(self, stream: TextIO | None = None, *, force: bool | None = None):
        self.stream = stream if stream is not None else sys.stderr
        tty = getattr(self.stream, "isatty", lambda: False)()
        self.enabled = tty if force is None else force
        self._progress = None
        self._task = None
        self._done = 0

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
            TimeElapsedColumn

        console = Console(file=self.stream, force_terminal=True)
        same_tty = getattr(sys.stdout, "isatty", lambda: False)() and self.stream is sys.stderr
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  TextColumn("{task.fields[last]}"), console=console,
                                  transient=True, redirect_stdout=same_tty, redirect_stderr=False)
        self._progress.start()
        self._task = self._progress.add_task(info.program, total=expected_rows(opts, info.nranks),
                                             last="")

    def message(self, line: str) -> None:
        pass

    def row(self, row: ResultRow) -> None:
        self._done += 1
        if self._progress is not None:
            self._progress.update(self._task, advance=1, last=human_size(row.size))

    def end(self, summary: RunSummary) -> None:
        self.close()

    def close(self) -> None:
        if self._progress is not None:
            p, self._progress = self._progress, None
            p.stop()

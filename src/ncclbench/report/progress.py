"""A progress bar for long sweeps, on stderr, only when stderr is a terminal.

A full 8 B..8 GiB sweep takes minutes and prints nothing useful for long
stretches at the large sizes.  `ProgressReporter` follows the harness'
Reporter protocol; it is told how many rows to expect (the run plan's
`expected_rows`, None when unknown) and moves one step per row.  Logs and
pipes never see it (stderr not a TTY), and stdout, where the table goes, is
never touched unless it is the same terminal (then rich prints the table
lines above the bar).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from ..core.config import BenchOptions
from ..core.results import ResultRow, RunInfo, RunSummary
from ..output.numfmt import human_size


class ProgressReporter:
    def __init__(self, expected_rows: int | None, stream: TextIO | None = None, *, force: bool | None = None):
        self.total = expected_rows
        self.stream = stream if stream is not None else sys.stderr
        tty = getattr(self.stream, "isatty", lambda: False)()
        self.enabled = tty if force is None else force
        self._progress: Any = None
        self._task: Any = None
        self._done = 0

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        if not self.enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(file=self.stream, force_terminal=True)
        same_tty = getattr(sys.stdout, "isatty", lambda: False)() and self.stream is sys.stderr
        self._progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                  MofNCompleteColumn(), TimeElapsedColumn(),
                                  TextColumn("{task.fields[last]}"), console=console,
                                  transient=True, redirect_stdout=same_tty, redirect_stderr=False)
        self._progress.start()
        self._task = self._progress.add_task(info.program, total=self.total, last="")

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

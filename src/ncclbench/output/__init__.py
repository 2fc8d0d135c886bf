"""Output formats: nccl-tests' text table and JSON, behind one reporter interface.

The harness measures and hands each piece to a `Reporter` as soon as it
exists (banner, then one row per size, then the footer), so output streams
during long sweeps and an interrupted run keeps what it printed.  Only the
writing process (world rank 0) creates reporters.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol, TextIO, runtime_checkable

from ncclbench.core.config import BenchOptions
from ncclbench.core.results import ResultRow, RunInfo, RunSummary


@runtime_checkable
class Reporter(Protocol):
    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        """Banner, device lines and column header."""

    def message(self, line: str) -> None:
        """A line printed as is in the stream after the header (e.g. the hypercube skip
        line); text only, others ignore it.  The `# Reducing maxBytes` note belongs
        before the column header: it is RunInfo.reduced_max_bytes."""

    def row(self, row: ResultRow) -> None:
        """One measured row, called as soon as it is complete."""

    def end(self, summary: RunSummary) -> None:
        """Footer."""

    def close(self) -> None:
        """Finalise; idempotent, and must work after an error mid-run."""


class MultiReporter:
    """Fans every call out to several reporters, in order.

    `close` closes all of them even if one fails, then re-raises the first failure.
    """

    def __init__(self, reporters: Iterable[Reporter]):
        self.reporters = list(reporters)

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        for r in self.reporters:
            r.begin(info, opts)

    def message(self, line: str) -> None:
        for r in self.reporters:
            r.message(line)

    def row(self, row: ResultRow) -> None:
        for r in self.reporters:
            r.row(row)

    def end(self, summary: RunSummary) -> None:
        for r in self.reporters:
            r.end(summary)

    def close(self) -> None:
        first: BaseException | None = None
        for r in self.reporters:
            try:
                r.close()
            except BaseException as exc:  # keep closing the others
                first = first or exc
        if first is not None:
            raise first


def open_output_reporters(opts: BenchOptions, stream: TextIO | None = None, *,
                          env: Mapping[str, str] | Iterable[str] | None = None,
                          clock: Callable[[], str] | None = None) -> MultiReporter:
    """The output-file reporters of a run: text on `stream` (stdout) plus JSON when -J names a
    `.json` file, metrics with --metrics, CSV with --csv.  A benchmark's whole set (these, the
    result store, the progress bar) follows the run as observers (`benchmark.observers`).

    The JSON file is created here, so an unwritable path raises ArgumentError
    before the run starts; the text reporter then announces the path used.
    `env` and `clock` go to `JsonReporter` (the environment it records, its clock).
    """
    from ncclbench.output.jsonout import JsonReporter
    from ncclbench.output.text import TextReporter

    reporters: list[Reporter] = []
    json_path = None
    if opts.json_enabled:
        jrep = JsonReporter(str(opts.output_file), opts, env=env, clock=clock)
        json_path = jrep.path
        reporters.append(jrep)
    if opts.metrics_file:
        from ncclbench.output.metrics import MetricsReporter

        reporters.append(MetricsReporter(opts.metrics_file))
    if opts.csv_file:
        from ncclbench.output.csvout import CsvReporter

        reporters.append(CsvReporter(opts.csv_file))
    text = TextReporter(stream if stream is not None else sys.stdout, opts, json_path=json_path)
    return MultiReporter([text] + reporters)


__all__ = ["Reporter", "MultiReporter", "open_output_reporters"]

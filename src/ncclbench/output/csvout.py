"""A run's table as CSV (`--csv FILE` on a run, `ncclbench show RUN --csv [FILE]`).

One line per row of nccl-tests' table, in its order and units (time in
microseconds, algbw/busbw in GB/s as printed, but at full precision), out-of-place
then in-place columns; `wrong` is empty where the row was not checked (-c 0,
nccl-tests' N/A); `timestamp` is when the row was measured (local time, on a live
run's file; `show --csv` of a stored run has it only where -S recorded it).  The
header names each column with its unit, so a spreadsheet or pandas.read_csv needs
nothing else.  A run's rows are written as they are measured,
so an interrupted run keeps what it measured, like the JSON file.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any, TextIO

from ..core.config import BenchOptions
from ..core.results import HalfResult, ResultRow, RunInfo, RunSummary
from .numfmt import now_string

HEADER = ("collective", "size_bytes", "count", "type", "redop", "root",
          "oop_time_us", "oop_algbw_gbps", "oop_busbw_gbps", "oop_wrong",
          "ip_time_us", "ip_algbw_gbps", "ip_busbw_gbps", "ip_wrong", "timestamp")


def _half(h: HalfResult) -> list[str]:
    return [repr(h.time_us), repr(h.algbw), repr(h.busbw), "" if h.wrong is None else str(h.wrong)]


def row_fields(collective: str, r: ResultRow, stamp: str | None = None) -> list[str]:
    """One CSV line; `stamp` fills the timestamp where the row has none (-S gives one)."""
    return [collective, str(r.size), str(r.count), r.type, r.redop, str(r.root), *_half(r.out_of_place),
            *_half(r.in_place), r.timestamp or stamp or ""]


def rows_csv(collective: str, rows: Iterable[ResultRow]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(HEADER)
    for r in rows:
        w.writerow(row_fields(collective, r))
    return buf.getvalue()


def write_rows(stream: TextIO, collective: str, rows: Iterable[ResultRow]) -> None:
    stream.write(rows_csv(collective, rows))


class CsvReporter:
    """A `Reporter`: the header at begin, each row as it is measured (flushed)."""

    def __init__(self, path: str):
        from .metrics import check_writable

        check_writable(path, "--csv")
        self.path = path
        self._f: TextIO | None = None
        self._w: Any = None  # csv.writer (its type is private to typeshed)
        self.collective = ""

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        from .metrics import collective_name

        self.collective = collective_name(info.program)
        self._f = open(self.path, "w", newline="")
        self._w = csv.writer(self._f, lineterminator="\n")
        self._w.writerow(HEADER)
        self._f.flush()

    def message(self, line: str) -> None:
        pass

    def row(self, row: ResultRow) -> None:
        if self._w is not None and self._f is not None:
            # a live run's row arrives as it is measured: its time is now (local, like -S's column)
            self._w.writerow(row_fields(self.collective, row, now_string()))
            self._f.flush()

    def end(self, summary: RunSummary) -> None:
        pass

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

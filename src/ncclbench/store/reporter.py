"""Saving runs: the live-run reporter and the importer's writer.

`StoreReporter` follows the harness' Reporter protocol (begin/message/row/
end/close).  Each row is committed in its own transaction the moment it is
measured, so a run killed at any point keeps everything measured before the
kill, and `close()` without `end()` records the run as 'interrupted'.

A broken store must not cost the user the benchmark they just ran: the first
database error is reported once on stderr and the reporter goes quiet.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sqlite3
import sys
from typing import TextIO

from .. import __version__
from ..config import BenchOptions
from ..errors import BenchError, ExitCode
from ..results import ResultRow, RunInfo, RunSummary
from .db import ResultStore
from .importers import ImportedRun


class StoreReporter:
    def __init__(self, store: ResultStore | None, *, warn: TextIO | None = None):
        """Write to `store`; warnings about a failing store go to `warn` (stderr)."""
        self.store = store
        self.run_id: int | None = None
        self.error: str | None = None
        self._seq = 0
        self._ended = False
        self._closed = False
        self._warn = warn
        self._owns_store = False

    def _guard(self, fn, *args) -> None:
        if self.error is not None:
            return
        try:
            fn(*args)
        except (sqlite3.Error, OSError, BenchError) as e:
            self.error = str(e)
            print(f"ncclbench: warning: result store {self.store.path} disabled for this run: {e}",
                  file=self._warn or sys.stderr)

    @classmethod
    def open(cls, path: str | os.PathLike | None = None, *,
             warn: TextIO | None = None) -> StoreReporter:
        """A reporter on the store at `path` (default: NCCLBENCH_DB / XDG location).

        If the store cannot be opened the benchmark still runs: one warning
        line, and the reporter records nothing."""
        try:
            rep = cls(ResultStore(path), warn=warn)
            rep._owns_store = True
            return rep
        except BenchError as e:
            rep = cls(None, warn=warn)
            rep.error = e.message
            print(f"ncclbench: warning: not saving this run: {e.message}", file=warn or sys.stderr)
            return rep

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        def _begin() -> None:
            facts = {"python": platform.python_version(), "platform": platform.platform(),
                     "ncclbench": __version__}
            recorded = dataclasses.replace(info, extra={**facts, **info.extra})
            self.run_id = self.store.begin_run(recorded, opts)
        self._guard(_begin)

    def message(self, line: str) -> None:
        if self.run_id is not None:
            self._guard(self.store.add_message, self.run_id, line)

    def row(self, row: ResultRow) -> None:
        if self.run_id is None:
            return
        self._guard(self.store.add_row, self.run_id, self._seq, row)
        self._seq += 1

    def end(self, summary: RunSummary) -> None:
        if self.run_id is None or self._ended:
            return
        self._guard(self.store.finish_run, self.run_id, summary)
        self._ended = True

    def close(self) -> None:
        """Idempotent; after an error (no end()) the run is kept as 'interrupted'."""
        if self._closed:
            return
        self._closed = True
        if self.run_id is not None and not self._ended:
            self._guard(self.store.mark_interrupted, self.run_id)
        if self._owns_store and self.store is not None:
            self.store.close()

    def check_baseline(self, name: str, max_drop_pct: float = 5.0,
                       max_rise_pct: float | None = None, out: TextIO | None = None) -> int:
        """`--baseline NAME`: gate the stored run (call after end/close); prints
        the check and returns 0 (ok) or 7 (regression)."""
        from .compare import gate_stored_run

        if self.run_id is None or self.store is None:
            raise BenchError(f"cannot check against baseline {name!r}: this run was not stored"
                             + (f" ({self.error})" if self.error else ""), ExitCode.ARGUMENT)
        with ResultStore(self.store.path, create=False) as store:
            return gate_stored_run(store, self.run_id, name, max_drop_pct, max_rise_pct, out)


def store_imported(store: ResultStore, runs: list[ImportedRun]) -> list[tuple[ImportedRun, int, bool]]:
    """Write parsed runs in ONE transaction: all land, or none do.

    Returns (run, id, is_new) per run; a run whose content was imported
    before is not stored twice (its earlier id is returned with is_new=False).
    """
    out: list[tuple[ImportedRun, int, bool]] = []
    with store.transaction():
        for r in runs:
            old = store.find_by_hash(r.content_hash)
            if old is not None:
                out.append((r, old, False))
                continue
            rid = store.begin_run(r.info, r.options, env=r.env, source=r.source,
                                  source_path=_abspath(r.source_path), content_hash=r.content_hash,
                                  status="running")
            for seq, row in enumerate(r.rows):
                store.add_row(rid, seq, row)
            for line in r.messages:
                store.add_message(rid, line)
            store.finish_run(rid, r.summary, status=r.status, end_time=r.end_time or None,
                             stamp_now=False)
            out.append((r, rid, True))
    return out


def _abspath(path: str) -> str:
    return os.path.abspath(path) if os.path.exists(path) else path

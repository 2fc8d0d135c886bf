"""Saving runs: the live-run reporter and the importer's writer.

`StoreReporter` follows the harness' Reporter protocol (begin/message/row/
end/close).  Each row is committed in its own transaction the moment it is
measured, so a run killed at any point keeps everything measured before the
kill, and `close()` without `end()` records the run as 'interrupted'
(`set_outcome` first says why, or that it was a timeout).  A process that
must end without unwinding (a signal while the main thread is stuck, the -T
watchdog's abort) still marks its run, through `launch.shutdown`'s last words
and a connection of its own.

A broken store must not cost the user the benchmark they just ran: the first
database error is reported once on stderr and the reporter goes quiet.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from .. import __version__
from ..core.config import BenchOptions
from ..core.errors import BenchError, ExitCode
from ..core.rank_link import note_for_launcher, register_last_words
from ..core.results import ResultRow, RunInfo, RunSummary
from .db import ResultStore, default_db_path, env_that_matters

if TYPE_CHECKING:  # the importers (and the log parser behind them) stay off a benchmark's start
    from .importers import ImportedRun


def platform_text() -> str:
    """`platform.platform()`'s 'Linux-6.8.0-x86_64-with-glibc2.39' without its cost at every run's
    start (importing `platform` and finding the C library's version by scanning the Python
    executable: ~20 ms); glibc states its version itself.  Elsewhere: platform.platform()."""
    try:
        lib = os.confstr("CS_GNU_LIBC_VERSION")  # 'glibc 2.39'
    except (AttributeError, ValueError, OSError):
        lib = None
    if not lib:
        import platform

        return platform.platform()
    u = os.uname()
    return f"{u.sysname}-{u.release}-{u.machine}-with-{lib.replace(' ', '')}"


class StoreReporter:
    def __init__(self, store: ResultStore | None, *, warn: TextIO | None = None, env: dict[str, str] | None = None):
        """Write to `store`; warnings about a failing store go to `warn` (stderr); `env`: the
        environment to record (default: this process's; a run that sets NCCL_* itself passes the user's)."""
        self.store = store
        self.env = env
        self.run_id: int | None = None
        self.error: str | None = None
        self._seq = 0
        self._ended = False
        self._closed = False
        self._warn = warn
        self._owns_store = False
        self._outcome: tuple[str, str | None] | None = None
        self._unregister: Callable[[], None] | None = None

    @property
    def _db(self) -> ResultStore:
        """The open store; only reached while there is one (`open` leaves error set otherwise)."""
        if self.store is None:
            raise BenchError("no result store open", ExitCode.INTERNAL)
        return self.store

    def _guard(self, fn: Callable[..., object], *args: object) -> None:
        if self.error is not None:
            return
        try:
            fn(*args)
        except (sqlite3.Error, OSError, BenchError) as e:
            self.error = str(e)
            where = self.store.path if self.store is not None else "(none)"
            print(f"ncclbench: warning: result store {where} disabled for this run: {e}",
                  file=self._warn or sys.stderr)

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, *,
             warn: TextIO | None = None, env: dict[str, str] | None = None) -> StoreReporter:
        """A reporter on the store at `path` (default: NCCLBENCH_DB / XDG location).

        If the store cannot be opened the benchmark still runs: one warning
        line, and the reporter records nothing."""
        try:
            rep = cls(ResultStore(path), warn=warn, env=env)
            rep._owns_store = True
            return rep
        except BenchError as e:
            rep = cls(None, warn=warn, env=env)
            rep.error = e.message
            print(f"ncclbench: warning: not saving this run: {e.message}", file=warn or sys.stderr)
            return rep

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        def _begin() -> None:
            facts: dict[str, str | float] = {"python": sys.version.split()[0], "platform": platform_text(),
                                             "ncclbench": __version__}
            try:  # a busy host explains a slow run; the gate warns when the runs it compares differ
                facts["loadavg_at_start"] = round(os.getloadavg()[0], 2)
            except OSError:
                pass
            recorded = dataclasses.replace(info, extra={**facts, **info.extra})
            env = None if self.env is None else env_that_matters(self.env)
            self.run_id = self._db.begin_run(recorded, opts, env=env)
        self._guard(_begin)
        if self.run_id is not None:
            self._unregister = register_last_words(self._last_words)
            note_for_launcher(run_id=self.run_id, db=str(self._db.path))

    def message(self, line: str) -> None:
        if self.run_id is not None:
            self._guard(self._db.add_message, self.run_id, line)

    def row(self, row: ResultRow) -> None:
        if self.run_id is None:
            return
        self._guard(self._db.add_row, self.run_id, self._seq, row)
        self._seq += 1

    def end(self, summary: RunSummary) -> None:
        if self.run_id is None or self._ended:
            return
        self._guard(self._db.finish_run, self.run_id, summary)
        self._ended = True

    def set_outcome(self, status: str, reason: str | None) -> None:
        """How the run ended when it did not finish ('interrupted' or 'timeout',
        and why); written by close().  Without it close() says 'interrupted'."""
        if self._outcome is None:
            self._outcome = (status, reason)

    @property
    def rows_written(self) -> int:
        return self._seq

    def close(self) -> None:
        """Idempotent; after an error (no end()) the run is kept as 'interrupted'
        (or as set_outcome said)."""
        if self._closed:
            return
        self._closed = True
        if self._unregister is not None:
            self._unregister()
        if self.run_id is not None and not self._ended:
            status, reason = self._outcome or ("interrupted", None)
            run_id = self.run_id
            self._guard(lambda: self._db.mark_interrupted(run_id, reason, status=status))
        if self._owns_store and self.store is not None:
            self.store.close()

    def _last_words(self, status: str, reason: str) -> None:
        """Runs from another thread while this process ends without unwinding:
        sqlite3 connections are per thread, so mark the run through a new one."""
        if self.run_id is None or self._ended or self.store is None or self.error is not None:
            return
        status, why = self._outcome or (status, reason)
        with ResultStore(self.store.path, create=False) as store:
            store.mark_interrupted(self.run_id, why, status=status)

    def check_baseline(self, name: str, max_drop_pct: float = 5.0,
                       max_rise_pct: float | None = None, out: TextIO | None = None) -> int:
        """`--baseline NAME`: gate the stored run (call after end/close); prints
        the check and returns 0 (ok), 7 (regression) or 9 (unstable candidate: not judged)."""
        from .baseline_gate import gate_stored_run

        if self.run_id is None or self.store is None:
            raise BenchError(f"cannot check against baseline {name!r}: this run was not stored"
                             + (f" ({self.error})" if self.error else ""), ExitCode.ARGUMENT)
        with ResultStore(self.store.path, create=False) as store:
            return gate_stored_run(store, self.run_id, name, max_drop_pct, max_rise_pct, out)


def baseline_problem(name: str, storing: bool) -> str | None:
    """Why `--baseline NAME` cannot gate this run, or None: checked before the sweep,
    so that a typo costs a line, not a whole run and then an error."""
    if not storing:
        return (f"--baseline {name}: this run would not be stored (--no-store or NCCLBENCH_NO_STORE=1), "
                "and the gate judges the stored run")
    path = default_db_path()
    if not path.exists():
        return f"no baseline named {name!r}: the result store {path} is empty (set one with `ncclbench baseline set NAME RUN`)"
    try:
        with ResultStore(path, create=False) as store:
            if store.get_baseline(name) is None:
                return (f"no baseline named {name!r} (set one with `ncclbench baseline set NAME RUN`; "
                        "see `ncclbench baseline list`)")
    except BenchError as e:  # a store it cannot read: the same words, before the sweep instead of after
        return e.message
    return None


def store_imported(store: ResultStore, runs: list[ImportedRun]) -> list[tuple[ImportedRun, int, bool]]:
    """Write parsed runs in ONE transaction: all land, or none do.

    Returns (run, id, is_new) per run; a run whose content was imported
    before is not stored twice (its earlier id is returned with is_new=False).
    """
    from .jsonlog import legacy_hash

    out: list[tuple[ImportedRun, int, bool]] = []
    with store.transaction():
        for r in runs:
            old = store.find_by_hash(r.content_hash)
            legacy = legacy_hash(r)
            if old is None and legacy is not None:
                old = store.find_by_hash(legacy)
            if old is None and r.source == "import:json":
                old = store.find_live_twin(r.info)
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

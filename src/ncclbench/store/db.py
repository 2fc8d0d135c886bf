"""The result store: one embedded SQLite file that keeps every run.

Why SQLite: one file, no server, transactional.  WAL journaling plus one
transaction per row means a run killed at any moment (kill -9, node reboot)
leaves a valid database holding every row committed so far, and an import
either lands completely or not at all.

Layout (schema version in PRAGMA user_version):
  runs      one per benchmark run or imported test; metadata as JSON columns
            (RunInfo.record(), BenchOptions / RunSummary as dataclasses.asdict);
            status running / complete / interrupted (a signal, a dead rank, an
            error) / timeout (-T, a rank that never answered), and why it ended
            (end_reason) when that was not a normal finish
  rows      one per printed result line (both placements as columns)
  per_iter  `-I` statistics per row and placement (times as JSON lists)
  messages  extra lines a run printed (warnings, notes), in order
  baselines named pointers to runs, for the regression gate
  baseline_runs  the further runs of a baseline made of several runs (its
            history: the gate's noise estimate); baselines.run_id is the newest

Schema 1 (before 'timeout', end_reason and baseline_runs) is upgraded in
place the first time a newer ncclbench opens the store for writing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import socket
import sqlite3
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.config import BenchOptions
from ..core.errors import ArgumentError, BenchError, ExitCode
from ..core.processes import pid_alive
from ..core.results import HalfResult, PerIterStats, ResultRow, RunInfo, RunSummary
from ..output.numfmt import now_string

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_D = TypeVar("_D", bound="DataclassInstance")  # a dataclass rebuilt from a stored record (_from_dict)

SCHEMA_VERSION = 3
# 'failed': an imported log of a run that ended with an error (nccl-tests' "Test NCCL failure", NCCL WARN
# lines and no table); schema 3 added it.
STATUSES = ("running", "complete", "interrupted", "timeout", "failed")
# `ncclbench tune` stores one run per candidate (tune/outputs.py), tied together by
# info.extra["tune"]; they are kept under their tune session and are not what
# `latest`/`latest~N` name: the newest *benchmark* run is.
TUNE_SOURCE = "ncclbench tune"
PLACEMENTS = ("out_of_place", "in_place")

# What the schema and its upgrade share: the runs table's columns (the upgrade rebuilds it) and
# the baseline_runs table (the upgrade adds it).
_RUNS_COLUMNS = """    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at    TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('running', 'complete', 'interrupted', 'timeout', 'failed')),
    source        TEXT NOT NULL,
    source_path   TEXT,
    content_hash  TEXT,
    program       TEXT NOT NULL,
    collective    TEXT NOT NULL,
    start_time    TEXT,
    end_time      TEXT,
    argv          TEXT NOT NULL,
    env           TEXT NOT NULL,
    info          TEXT NOT NULL,
    options       TEXT NOT NULL,
    summary       TEXT,
    hosts         TEXT NOT NULL,
    gpus          TEXT NOT NULL,
    nranks        INTEGER,
    writer_host   TEXT,
    writer_pid    INTEGER,
    end_reason    TEXT"""
_BASELINE_RUNS = """CREATE TABLE baseline_runs (
    name       TEXT NOT NULL REFERENCES baselines(name) ON DELETE CASCADE,
    run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    PRIMARY KEY (name, run_id)
);
"""

_SCHEMA = f"""
CREATE TABLE runs (
{_RUNS_COLUMNS}
);
CREATE INDEX runs_hash ON runs(content_hash);
CREATE TABLE rows (
    run_id    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq       INTEGER NOT NULL,
    size      INTEGER NOT NULL,
    count     INTEGER NOT NULL,
    type      TEXT NOT NULL,
    redop     TEXT NOT NULL,
    root      INTEGER NOT NULL,
    timestamp TEXT,
    o_time REAL, o_cpu_time REAL, o_algbw REAL, o_busbw REAL, o_wrong INTEGER,
    i_time REAL, i_cpu_time REAL, i_algbw REAL, i_busbw REAL, i_wrong INTEGER,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE per_iter (
    run_id    INTEGER NOT NULL,
    seq       INTEGER NOT NULL,
    placement TEXT NOT NULL CHECK (placement IN ('out_of_place', 'in_place')),
    skipped   INTEGER NOT NULL,
    min_us REAL, max_us REAL, avg_us REAL, p50_us REAL, p95_us REAL, p99_us REAL,
    stdev_us REAL, cv_pct REAL,
    times_us     TEXT NOT NULL,
    per_process  TEXT,
    PRIMARY KEY (run_id, seq, placement),
    FOREIGN KEY (run_id, seq) REFERENCES rows(run_id, seq) ON DELETE CASCADE
);
CREATE TABLE messages (
    run_id    INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    seq       INTEGER NOT NULL,
    after_row INTEGER NOT NULL,
    line      TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE TABLE baselines (
    name       TEXT PRIMARY KEY,
    run_id     INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
    created_at TEXT NOT NULL,
    note       TEXT
);
{_BASELINE_RUNS}"""

# Schema 1 -> 2: SQLite cannot change a CHECK constraint, so the runs table is
# rebuilt (the documented 12-step way: foreign keys off, copy, swap, check).
_UPGRADE_1_TO_2 = f"""
CREATE TABLE runs_v2 (
{_RUNS_COLUMNS}
);
INSERT INTO runs_v2 SELECT *, NULL FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v2 RENAME TO runs;
CREATE INDEX runs_hash ON runs(content_hash);
{_BASELINE_RUNS}"""

# Schema 2 -> 3: the status CHECK gains 'failed' (the same rebuild).
_UPGRADE_2_TO_3 = f"""
CREATE TABLE runs_v3 (
{_RUNS_COLUMNS}
);
INSERT INTO runs_v3 SELECT * FROM runs;
DROP TABLE runs;
ALTER TABLE runs_v3 RENAME TO runs;
CREATE INDEX runs_hash ON runs(content_hash)"""


def default_db_path() -> Path:
    """NCCLBENCH_DB, else $XDG_DATA_HOME/ncclbench/results.sqlite (~/.local/share/...)."""
    env = os.environ.get("NCCLBENCH_DB")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "ncclbench" / "results.sqlite"


def env_that_matters(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """NCCL_* and CUDA_* variables only: enough to reproduce, nothing private."""
    source: Mapping[str, str] = os.environ if environ is None else environ
    return {k: v for k, v in sorted(source.items()) if k.startswith(("NCCL_", "CUDA_"))}


def _experiment(options_json: str, env_json: str) -> tuple[str, str]:
    """What a stored run measured, comparable across runs: its measured options (BenchOptions
    less OUTPUT_ONLY_OPTIONS; a run stored by an older version gets today's defaults for fields it
    lacked) and its NCCL_*/CUDA_* settings."""
    try:
        options = _from_dict(BenchOptions, json.loads(options_json)).measured()
        env = json.loads(env_json)
    except (ValueError, TypeError):
        return (options_json, env_json)
    return (json.dumps(options, sort_keys=True, default=str), json.dumps(env, sort_keys=True))


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


# ---------------------------------------------------------------- (de)serialisation

def _from_dict(cls: type[_D], data: Mapping[str, Any]) -> _D:
    """Build a dataclass from a dict, ignoring keys it no longer has and
    defaulting keys it gained: stored runs outlive code changes."""
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in data.items() if k in names})


def info_from_json(text: str) -> RunInfo:
    return RunInfo.from_record(json.loads(text))


def options_from_json(text: str) -> BenchOptions:
    return _from_dict(BenchOptions, json.loads(text))


def summary_from_json(text: str | None) -> RunSummary | None:
    return None if text is None else _from_dict(RunSummary, json.loads(text))


def inserted_id(cur: sqlite3.Cursor) -> int:
    """The id SQLite gave the row an INSERT just made (always set after one)."""
    if cur.lastrowid is None:
        raise BenchError("the result store gave no id to the row just written", ExitCode.INTERNAL)
    return int(cur.lastrowid)


PER_ITER_STATS = ("min_us", "max_us", "avg_us", "p50_us", "p95_us", "p99_us", "stdev_us", "cv_pct")


def per_iter_stats(skipped: int, stats: list[float], times_us: list[float],
                   per_process: list[list[float]] | None) -> PerIterStats:
    """PerIterStats from its eight statistics in PER_ITER_STATS order (a stored row, a -J file)."""
    if len(stats) != len(PER_ITER_STATS):
        raise ValueError(f"{len(stats)} per-iteration statistics, expected {len(PER_ITER_STATS)}")
    mn, mx, avg, p50, p95, p99, sd, cv = stats
    return PerIterStats(skipped, mn, mx, avg, p50, p95, p99, sd, cv, times_us=times_us,
                        per_process_max_times_us=per_process)


def _f(v: float | int | None) -> float:
    """SQLite stores NaN as NULL; read it back as NaN."""
    return math.nan if v is None else float(v)


@dataclass
class RunHeader:
    """What `history` lists: one run without its rows."""

    id: int
    created_at: str
    status: str
    source: str
    source_path: str | None
    program: str
    collective: str
    start_time: str | None
    argv: list[str]
    hosts: list[str]
    gpus: list[str]
    nranks: int | None
    nrows: int
    end_reason: str | None = None  # why an interrupted/timeout run ended, when known
    writer_host: str | None = None
    writer_pid: int | None = None


@dataclass
class StoredRun:
    """A complete run read back from the store."""

    id: int
    created_at: str
    status: str
    source: str
    source_path: str | None
    info: RunInfo
    options: BenchOptions
    rows: list[ResultRow]
    summary: RunSummary | None
    env: dict[str, str]
    messages: list[str] = field(default_factory=list)
    end_time: str | None = None
    end_reason: str | None = None

    @property
    def label(self) -> str:
        return f"run {self.id}"


class ResultStore:
    """Open (and create, unless `create=False`) the store at `path`.

    Every public write is its own transaction; `transaction()` groups several.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, create: bool = True):
        self.path = Path(path) if path is not None else default_db_path()
        if not self.path.exists():
            if not create:
                raise BenchError(f"no result store at {self.path} (nothing recorded yet)",
                                 ExitCode.ARGUMENT)
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise BenchError(f"cannot create result store directory {self.path.parent}: "
                                 f"{e.strerror or e}", ExitCode.ARGUMENT) from None
        elif self.path.is_dir():
            raise BenchError(f"result store path {self.path} is a directory", ExitCode.ARGUMENT)
        try:
            self.conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
        except sqlite3.Error as e:
            raise BenchError(f"cannot open result store {self.path}: {e}", ExitCode.ARGUMENT) from None
        try:
            self._setup()
        except sqlite3.DatabaseError as e:
            self.conn.close()
            raise BenchError(f"{self.path} is not an ncclbench result store ({e})",
                             ExitCode.ARGUMENT) from None
        except BenchError:
            self.conn.close()
            raise

    # ------------------------------------------------------------------ setup
    def _setup(self) -> None:
        c = self.conn
        c.execute("PRAGMA busy_timeout = 30000")
        c.execute("PRAGMA foreign_keys = ON")
        version = c.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise BenchError(f"result store {self.path} has schema version {version}; this "
                             f"ncclbench understands up to {SCHEMA_VERSION} (upgrade ncclbench)",
                             ExitCode.ARGUMENT)
        if version == 0:
            tables = c.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
            if tables:
                raise BenchError(f"{self.path} is an SQLite database but not an ncclbench result "
                                 "store", ExitCode.ARGUMENT)
            c.execute("PRAGMA journal_mode = WAL")
            with self.transaction():
                # Re-check inside the write lock: another process may have created it meanwhile.
                if c.execute("PRAGMA user_version").fetchone()[0] == 0:
                    for stmt in _SCHEMA.split(";"):
                        if stmt.strip():
                            c.execute(stmt)
                    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        else:
            c.execute("PRAGMA journal_mode = WAL")
            if version < SCHEMA_VERSION:
                self._upgrade(version)
        c.execute("PRAGMA synchronous = NORMAL")

    def _upgrade(self, version: int) -> None:
        """Bring an older store up to SCHEMA_VERSION (inside one transaction;
        another process may be upgrading it at the same moment)."""
        c = self.conn
        c.execute("PRAGMA foreign_keys = OFF")  # must be set outside a transaction
        try:
            with self.transaction():
                now = c.execute("PRAGMA user_version").fetchone()[0]
                # 1 -> 2 builds the runs table with today's columns and CHECK, so it also does 2 -> 3
                steps = _UPGRADE_1_TO_2 if now == 1 else _UPGRADE_2_TO_3 if now == 2 else ""
                if steps:
                    for stmt in steps.split(";"):
                        if stmt.strip():
                            c.execute(stmt)
                    bad = c.execute("PRAGMA foreign_key_check").fetchall()
                    if bad:
                        raise BenchError(f"cannot upgrade result store {self.path}: it holds rows of "
                                         f"runs that do not exist ({len(bad)} found)", ExitCode.ARGUMENT)
                    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        finally:
            c.execute("PRAGMA foreign_keys = ON")

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT, rolled back on any exception; nestable
        (an inner block joins the outer transaction)."""
        if self.conn.in_transaction:
            yield self.conn
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    # ------------------------------------------------------------------ writes
    def begin_run(self, info: RunInfo, options: BenchOptions, *, env: dict[str, str] | None = None,
                  source: str = "ncclbench", source_path: str | None = None,
                  content_hash: str | None = None, status: str = "running") -> int:
        """Insert a run (no rows yet) and return its id."""
        if status not in STATUSES:
            raise ValueError(f"bad status {status!r}")
        hosts = list(info.hosts) or sorted({d.hostname for d in info.devices})
        gpus = [d.device_info for d in info.devices]
        with self.transaction() as c:
            cur = c.execute(
                "INSERT INTO runs (created_at, status, source, source_path, content_hash, program,"
                " collective, start_time, argv, env, info, options, hosts, gpus, nranks,"
                " writer_host, writer_pid) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (_now(), status, source, source_path, content_hash, info.program,
                 options.collective, info.start_time or None, json.dumps(list(info.argv)),
                 json.dumps(env_that_matters() if env is None else env),
                 json.dumps(info.record()), json.dumps(dataclasses.asdict(options)),
                 json.dumps(hosts), json.dumps(gpus), info.nranks,
                 socket.gethostname(), os.getpid()))
            return inserted_id(cur)

    def add_row(self, run_id: int, seq: int, row: ResultRow) -> None:
        """Store one result row (and its -I statistics) in its own transaction."""
        o, i = row.out_of_place, row.in_place
        with self.transaction() as c:
            c.execute(
                "INSERT INTO rows VALUES (?,?,?,?,?,?,?,?, ?,?,?,?,?, ?,?,?,?,?)",
                (run_id, seq, row.size, row.count, row.type, row.redop, row.root, row.timestamp,
                 o.time_us, o.cpu_time_us, o.algbw, o.busbw, o.wrong,
                 i.time_us, i.cpu_time_us, i.algbw, i.busbw, i.wrong))
            for placement, half in zip(PLACEMENTS, (o, i)):
                p = half.per_iter
                if p is None:
                    continue
                c.execute(
                    "INSERT INTO per_iter VALUES (?,?,?,?, ?,?,?,?,?,?,?,?, ?,?)",
                    (run_id, seq, placement, p.skipped_iterations, p.min_us, p.max_us, p.avg_us,
                     p.p50_us, p.p95_us, p.p99_us, p.stdev_us, p.cv_pct, json.dumps(p.times_us),
                     None if p.per_process_max_times_us is None
                     else json.dumps(p.per_process_max_times_us)))

    def add_message(self, run_id: int, line: str) -> None:
        with self.transaction() as c:
            seq = c.execute("SELECT count(*) FROM messages WHERE run_id = ?", (run_id,)).fetchone()[0]
            after = c.execute("SELECT count(*) FROM rows WHERE run_id = ?", (run_id,)).fetchone()[0]
            c.execute("INSERT INTO messages VALUES (?,?,?,?)", (run_id, seq, after, line))

    def finish_run(self, run_id: int, summary: RunSummary | None, *, status: str = "complete",
                   end_time: str | None = None, stamp_now: bool = True) -> None:
        """Set the final status and summary; end_time defaults to now unless stamp_now=False."""
        if end_time is None and stamp_now:
            end_time = now_string()
        if status not in STATUSES:
            raise ValueError(f"bad status {status!r}")
        with self.transaction() as c:
            c.execute("UPDATE runs SET status = ?, summary = ?, end_time = ? WHERE id = ?",
                      (status, None if summary is None else json.dumps(dataclasses.asdict(summary)),
                       end_time, run_id))

    def mark_interrupted(self, run_id: int, reason: str | None = None, *,
                         status: str = "interrupted") -> bool:
        """End a run that is still 'running' as `status` ('interrupted' or
        'timeout'), with why; a run that already ended keeps its status.
        Returns True when it was changed."""
        if status not in ("interrupted", "timeout"):
            raise ValueError(f"bad status {status!r}")
        with self.transaction() as c:
            cur = c.execute("UPDATE runs SET status = ?, end_reason = ?, end_time = coalesce(end_time, ?) "
                            "WHERE id = ? AND status = 'running'", (status, reason, now_string(), run_id))
            return cur.rowcount > 0

    def set_end_reason(self, run_id: int, reason: str, status: str | None = None) -> None:
        """Say why a run that did not finish ended, and (status) how: the launcher
        knows the root cause better than a rank that was only told to stop."""
        if status not in (None, "interrupted", "timeout"):
            raise ValueError(f"bad status {status!r}")
        with self.transaction() as c:
            c.execute("UPDATE runs SET end_reason = ?, status = coalesce(?, status) WHERE id = ? "
                      "AND status IN ('interrupted', 'timeout')", (reason, status, run_id))

    def end_reason(self, run_id: int) -> str | None:
        r = self.conn.execute("SELECT end_reason FROM runs WHERE id = ?", (run_id,)).fetchone()
        return None if r is None else r[0]

    def find_live_twin(self, info: RunInfo) -> int | None:
        """The run ncclbench stored live that an imported file (its own -J JSON) records: same
        program, start time, command line, hosts and rank count.  A live run has no content hash
        (it is stored row by row), so without this its -J file would be stored a second time and,
        as the newest id, become `latest` though it is the older record."""
        if not info.start_time:
            return None
        hosts = list(info.hosts) or sorted({d.hostname for d in info.devices})
        r = self.conn.execute(
            "SELECT id FROM runs WHERE source = 'ncclbench' AND program = ? AND start_time = ? AND argv = ? "
            "AND hosts = ? AND nranks IS ? ORDER BY id LIMIT 1",
            (info.program, info.start_time, json.dumps(list(info.argv)), json.dumps(hosts), info.nranks)).fetchone()
        return None if r is None else int(r[0])

    def find_by_hash(self, content_hash: str) -> int | None:
        r = self.conn.execute("SELECT id FROM runs WHERE content_hash = ? ORDER BY id LIMIT 1",
                              (content_hash,)).fetchone()
        return None if r is None else int(r[0])

    # ------------------------------------------------------------------ baselines
    def set_baseline(self, name: str, run_id: int | list[int], note: str | None = None) -> None:
        """Name one run, or several runs of the same test (the newest becomes the
        reference, all of them the history the gate takes its noise from)."""
        if not name or name.strip() != name or name.isdigit():
            raise ArgumentError(f"bad baseline name {name!r} (non-empty, no surrounding spaces, "
                                "not a plain number)")
        ids = sorted(set([run_id] if isinstance(run_id, int) else run_id))
        if not ids:
            raise ArgumentError("a baseline needs at least one run")
        programs = {rid: self.get_run_header(rid).program for rid in ids}
        if len(set(programs.values())) > 1:
            raise ArgumentError("a baseline's runs must be runs of one test, not " + ", ".join(
                f"run {r} ({p})" for r, p in programs.items()))
        with self.transaction() as c:
            c.execute("INSERT INTO baselines VALUES (?,?,?,?) ON CONFLICT(name) DO UPDATE SET "
                      "run_id = excluded.run_id, created_at = excluded.created_at, "
                      "note = excluded.note", (name, ids[-1], _now(), note))
            c.execute("DELETE FROM baseline_runs WHERE name = ?", (name,))
            c.executemany("INSERT INTO baseline_runs VALUES (?,?)", [(name, r) for r in ids[:-1]])

    def get_baseline(self, name: str) -> int | None:
        """The baseline's reference run (its newest run)."""
        r = self.conn.execute("SELECT run_id FROM baselines WHERE name = ?", (name,)).fetchone()
        return None if r is None else int(r[0])

    def get_baseline_runs(self, name: str) -> list[int]:
        """Every run of the baseline, oldest first (the reference run last); [] if unknown."""
        ref = self.get_baseline(name)
        if ref is None:
            return []
        more = [int(r[0]) for r in self.conn.execute(
            "SELECT run_id FROM baseline_runs WHERE name = ? ORDER BY run_id", (name,))]
        return sorted(set(more + [ref]))

    def runs_of_same_command(self, run_id: int, limit: int = 10) -> list[int]:
        """The newest `limit` finished ('complete') runs of the same experiment as `run_id` (program,
        rank count, hosts, measured options and NCCL settings: see `_experiment`), up to and including
        it, oldest first: `baseline set NAME RUN --runs N` uses them as the baseline's history.  Output
        options (-J, --csv, --metrics, progress) do not split a history."""
        r = self.conn.execute("SELECT program, nranks, hosts, options, env FROM runs WHERE id = ?",
                              (run_id,)).fetchone()
        if r is None:
            raise ArgumentError(self._unknown(run_id))
        want = _experiment(r[3], r[4])
        ids: list[int] = []
        for rid, options, env in self.conn.execute(
                "SELECT id, options, env FROM runs WHERE program = ? AND nranks IS ? AND hosts = ? "
                "AND id <= ? AND (status = 'complete' OR id = ?) ORDER BY id DESC", (*r[:3], run_id, run_id)):
            if len(ids) < int(limit) and _experiment(options, env) == want:
                ids.append(int(rid))
        return sorted(ids)

    def list_baselines(self) -> list[tuple[str, int, str, str | None]]:
        return [tuple(r) for r in self.conn.execute(
            "SELECT name, run_id, created_at, note FROM baselines ORDER BY name")]

    def delete_baseline(self, name: str) -> None:
        with self.transaction() as c:
            if c.execute("DELETE FROM baselines WHERE name = ?", (name,)).rowcount == 0:
                raise ArgumentError(f"no baseline named {name!r}")

    # ------------------------------------------------------------------ reads
    def count_runs(self) -> int:
        return int(self.conn.execute("SELECT count(*) FROM runs").fetchone()[0])

    def latest_run_id(self) -> int | None:
        r = self.conn.execute("SELECT max(id) FROM runs").fetchone()
        return None if r[0] is None else int(r[0])

    def _header(self, r: sqlite3.Row | tuple[Any, ...]) -> RunHeader:
        status, reason = r[2], r[15]
        if status == "running" and r[12] == socket.gethostname() and r[13] and not pid_alive(r[13]):
            status = "interrupted"  # its writer died without a word (kill -9, OOM, the MPI job killed it)
            reason = reason or f"the process that recorded it (pid {r[13]}) ended without finishing it"
        return RunHeader(id=r[0], created_at=r[1], status=status, source=r[3], source_path=r[4],
                         program=r[5], collective=r[6], start_time=r[7], argv=json.loads(r[8]),
                         hosts=json.loads(r[9]), gpus=json.loads(r[10]), nranks=r[11],
                         nrows=int(r[14]), end_reason=reason, writer_host=r[12], writer_pid=r[13])

    _HEADER_SQL = ("SELECT id, created_at, status, source, source_path, program, collective,"
                   " start_time, argv, hosts, gpus, nranks, writer_host, writer_pid,"
                   " (SELECT count(*) FROM rows WHERE rows.run_id = runs.id), end_reason FROM runs")

    def list_runs(self, limit: int | None = None, program: str | None = None,
                  without_source: str | None = None) -> list[RunHeader]:
        """Newest first; `without_source` leaves out the runs of that source (history: tune's candidates)."""
        sql, args, where = self._HEADER_SQL, [], []
        if program:
            where.append("(program = ? OR collective = ?)")
            args += [program, program]
        if without_source:
            where.append("source != ?")
            args.append(without_source)
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC"
        if limit is not None and limit > 0:
            sql += f" LIMIT {int(limit)}"
        return [self._header(r) for r in self.conn.execute(sql, args)]

    def get_run_header(self, run_id: int) -> RunHeader:
        r = self.conn.execute(self._HEADER_SQL + " WHERE id = ?", (run_id,)).fetchone()
        if r is None:
            raise ArgumentError(self._unknown(run_id))
        return self._header(r)

    def count_source(self, source: str) -> int:
        """How many runs that source stored."""
        return int(self.conn.execute("SELECT COUNT(*) FROM runs WHERE source = ?", (source,)).fetchone()[0])

    def _unknown(self, ref: int | str) -> str:
        n = self.count_runs()
        if n == 0:
            return f"unknown run {ref}: the result store {self.path} is empty"
        return f"unknown run {ref} (the store {self.path} holds runs " \
               f"{self._min_id()}..{self.latest_run_id()}; see `ncclbench history`)"

    def _min_id(self) -> int:
        return int(self.conn.execute("SELECT min(id) FROM runs").fetchone()[0])

    def get_run(self, run_id: int) -> StoredRun:
        c = self.conn
        r = c.execute("SELECT id, created_at, status, source, source_path, info, options, summary,"
                      " env, end_time FROM runs WHERE id = ?", (run_id,)).fetchone()
        if r is None:
            raise ArgumentError(self._unknown(run_id))
        header = self.get_run_header(run_id)
        per_iter: dict[tuple[int, str], PerIterStats] = {}
        for p in c.execute("SELECT seq, placement, skipped, min_us, max_us, avg_us, p50_us, p95_us,"
                           " p99_us, stdev_us, cv_pct, times_us, per_process FROM per_iter"
                           " WHERE run_id = ?", (run_id,)):
            per_iter[(p[0], p[1])] = per_iter_stats(
                int(p[2]), [_f(v) for v in p[3:11]], json.loads(p[11]),
                None if p[12] is None else json.loads(p[12]))
        rows = []
        for q in c.execute("SELECT * FROM rows WHERE run_id = ? ORDER BY seq", (run_id,)):
            seq = q[1]
            halves = []
            for placement, base in zip(PLACEMENTS, (8, 13)):
                halves.append(HalfResult(time_us=_f(q[base]), cpu_time_us=_f(q[base + 1]),
                                         algbw=_f(q[base + 2]), busbw=_f(q[base + 3]),
                                         wrong=q[base + 4], per_iter=per_iter.get((seq, placement))))
            rows.append(ResultRow(size=q[2], count=q[3], type=q[4], redop=q[5], root=q[6],
                                  out_of_place=halves[0], in_place=halves[1], timestamp=q[7]))
        messages = [m[0] for m in c.execute(
            "SELECT line FROM messages WHERE run_id = ? ORDER BY seq", (run_id,))]
        return StoredRun(id=r[0], created_at=r[1], status=header.status, source=r[3],
                         source_path=r[4], info=info_from_json(r[5]),
                         options=options_from_json(r[6]), rows=rows,
                         summary=summary_from_json(r[7]), env=json.loads(r[8]),
                         messages=messages, end_time=r[9], end_reason=header.end_reason)

    def resolve(self, ref: str) -> int:
        """A run id, `latest`/`last`, `latest~N`, or a baseline name -> run id."""
        ref = ref.strip()
        if ref.lstrip("-").isdigit():
            rid = int(ref)
            self.get_run_header(rid)
            return rid
        low = ref.lower()
        if low in ("latest", "last") or low.startswith(("latest~", "last~")):
            back = 0
            if "~" in low:
                tail = low.split("~", 1)[1]
                if not tail.isdigit():
                    raise ArgumentError(f"bad run reference {ref!r} (use latest~N)")
                back = int(tail)
            r = self.conn.execute("SELECT id FROM runs WHERE source != ? ORDER BY id DESC LIMIT 1 OFFSET ?",
                                  (TUNE_SOURCE, back)).fetchone()
            if r is None:
                raise ArgumentError(self._unknown(ref))
            return int(r[0])
        base = self.get_baseline(ref)
        if base is not None:
            return base
        raise ArgumentError(self._unknown(repr(ref)) + " — not a run id, 'latest' or a baseline name")



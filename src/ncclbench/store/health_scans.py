"""Health scans in the result store: `ncclbench health` keeps every scan beside the runs.

A scan is not a benchmark run (no rows, no nccl-tests options), so it has a
table of its own, `health_scans`, holding the scan's JSON document (what
`--json` writes) and the columns `history --health` lists.  The table is
created the first time a scan is kept (CREATE TABLE IF NOT EXISTS), so the
store's schema version is unchanged: an older ncclbench opens the file as
before and does not see the scans.  Scans have their own ids, referred to
as `health:N`, `health:latest` or `health:latest~N` (a bare `latest` stays
the newest *run*, so `compare latest~1 latest` is never handed a scan); a
health JSON file written by --json is a reference too.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ..core.errors import ArgumentError
from .db import ResultStore, default_db_path

PREFIX = "health:"

_TABLE = """
CREATE TABLE IF NOT EXISTS health_scans (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at   TEXT NOT NULL,
    start_time   TEXT,
    backend      TEXT,
    nhosts       INTEGER NOT NULL,
    nranks       INTEGER NOT NULL,
    faults_found INTEGER NOT NULL,
    nfindings    INTEGER NOT NULL,
    exit_code    INTEGER,
    drain        TEXT NOT NULL,
    wall_s       REAL,
    argv         TEXT NOT NULL,
    doc          TEXT NOT NULL,
    outcome      TEXT,
    summary      TEXT
)
"""
# columns added after the table first shipped: a store made by an older ncclbench gets them
# (ALTER TABLE ... ADD COLUMN, NULL for the scans it already holds: their outcome is unknown)
_ADDED = (("outcome", "TEXT"), ("summary", "TEXT"))


@dataclass
class ScanHeader:
    """One line of `history --health`."""

    id: int
    created_at: str
    start_time: str | None
    backend: str | None
    nhosts: int
    nranks: int
    faults_found: bool
    exit_code: int | None
    drain: list[str]
    wall_s: float | None
    argv: list[str]
    findings: int = 0
    # "faults found" / "not judged" / "healthy"; None for a scan stored before outcomes were kept
    outcome: str | None = None
    summary: dict[str, int] | None = None  # hosts per status (healthy, faulty, not judged, ...)

    @property
    def label(self) -> str:
        return f"{PREFIX}{self.id}"


@dataclass
class StoredScan:
    """A scan read back: its document (the --json file's content) and where it came from."""

    label: str
    doc: dict[str, Any]


def _now() -> str:
    return datetime.now().astimezone().isoformat(timespec="seconds")


def is_scan_ref(ref: str) -> bool:
    """True for `health:...` references and for a health JSON file."""
    if ref.lower().startswith(PREFIX):
        return True
    if os.path.isfile(ref) and ref.endswith(".json"):
        try:
            with open(ref) as f:
                head = f.read(4096)
        except OSError:
            return False
        return '"ncclbench_health"' in head
    return False


def _ensure(store: ResultStore) -> None:
    with store.transaction() as c:
        c.execute(_TABLE)
        have = {r[1] for r in c.execute("PRAGMA table_info(health_scans)")}
        for name, kind in _ADDED:
            if name not in have:
                c.execute(f"ALTER TABLE health_scans ADD COLUMN {name} {kind}")


def _has_table(store: ResultStore) -> bool:
    row = store.conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND name='health_scans'")
    return bool(row.fetchone()[0])


def add_scan(store: ResultStore, doc: dict[str, Any]) -> int:
    """Keep one scan; returns its id."""
    _ensure(store)
    nranks = sum(int(n) for n in doc.get("gpus_per_host", []))
    wall = sum(float(r.get("wall_s", 0.0)) for r in doc.get("rounds", []))
    with store.transaction() as c:
        cur = c.execute(
            "INSERT INTO health_scans (created_at, start_time, backend, nhosts, nranks, faults_found, nfindings, "
            "exit_code, drain, wall_s, argv, doc, outcome, summary) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (_now(), doc.get("start_time"), doc.get("backend"), len(doc.get("hosts", [])), nranks,
             int(bool(doc.get("faults_found"))), len(doc.get("findings", [])), doc.get("exit_code"),
             json.dumps(doc.get("drain", [])), wall,
             json.dumps(list(doc.get("argv", []))), json.dumps(doc, default=str), doc.get("outcome"),
             json.dumps(doc["summary"]) if doc.get("summary") is not None else None))
        return int(cur.lastrowid or 0)


def save_scan(doc: dict[str, Any], db: str | os.PathLike[str] | None = None) -> int:
    """Open the store (creating it), keep the scan, close; its id."""
    with ResultStore(Path(db).expanduser() if db else default_db_path()) as store:
        return add_scan(store, doc)


def list_scans(store: ResultStore, limit: int | None = None) -> list[ScanHeader]:
    """Newest first."""
    if not _has_table(store):
        return []
    _ensure(store)  # an older store's table gets the newer columns
    sql = ("SELECT id, created_at, start_time, backend, nhosts, nranks, faults_found, exit_code, drain, wall_s, "
           "argv, nfindings, outcome, summary FROM health_scans ORDER BY id DESC")
    if limit:
        sql += f" LIMIT {int(limit)}"
    out = []
    for r in store.conn.execute(sql):
        out.append(ScanHeader(r[0], r[1], r[2], r[3], r[4], r[5], bool(r[6]), r[7], json.loads(r[8]), r[9],
                              json.loads(r[10]), int(r[11] or 0), r[12], json.loads(r[13]) if r[13] else None))
    return out


def resolve_scan(store: ResultStore, ref: str) -> int:
    """`health:N`, `health:latest`, `health:latest~N` -> scan id."""
    body = ref[len(PREFIX):].strip().lower() if ref.lower().startswith(PREFIX) else ref.strip().lower()
    ids: list[int] = [r[0] for r in store.conn.execute("SELECT id FROM health_scans ORDER BY id DESC")] \
        if _has_table(store) else []
    if not ids:
        raise ArgumentError(f"no health scans in {store.path} (run `ncclbench health` first)")
    if body.isdigit():
        if int(body) not in ids:
            raise ArgumentError(f"no health scan {body} in {store.path} (scans {min(ids)}..{max(ids)}; "
                                "see `ncclbench history --health`)")
        return int(body)
    if body in ("latest", "last") or body.startswith(("latest~", "last~")):
        back = body.partition("~")[2]
        if back and not back.isdigit():
            raise ArgumentError(f"bad health scan reference {ref!r} (use health:latest~N)")
        n = int(back or 0)
        if n >= len(ids):
            raise ArgumentError(f"only {len(ids)} health scan(s) stored; {ref!r} goes back too far")
        return ids[n]
    raise ArgumentError(f"bad health scan reference {ref!r}: use health:N, health:latest or health:latest~N")


def get_scan(store: ResultStore, scan_id: int) -> StoredScan:
    row = store.conn.execute("SELECT doc FROM health_scans WHERE id = ?", (scan_id,)).fetchone()
    if row is None:
        raise ArgumentError(f"no health scan {scan_id} in {store.path}")
    return StoredScan(f"{PREFIX}{scan_id}", json.loads(row[0]))


def load_scan(ref: str, db: str | os.PathLike[str] | None = None) -> StoredScan:
    """A scan by reference: a health JSON file, or `health:...` in the store at `db`."""
    if not ref.lower().startswith(PREFIX):
        try:
            doc = json.loads(Path(ref).read_text())
        except (OSError, ValueError) as exc:
            raise ArgumentError(f"cannot read health scan {ref}: {exc}") from None
        if not isinstance(doc, dict) or "ncclbench_health" not in doc:
            raise ArgumentError(f"{ref} is not a health scan (no 'ncclbench_health' key)")
        return StoredScan(os.path.basename(ref), doc)
    path = Path(db).expanduser() if db else default_db_path()
    if not path.exists():
        raise ArgumentError(f"no result store at {path} (nothing recorded yet)")
    with ResultStore(path, create=False) as store:
        return get_scan(store, resolve_scan(store, ref))

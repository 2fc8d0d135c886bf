"""How a run that did not finish is stored (schema 2): 'interrupted' or
'timeout' with the reason, from the reporter, from a thread ending the process
(last words), or from the launcher afterwards; stores of schema 1 are upgraded
in place; baselines made of several runs."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading

import pytest
from test_store_db import make_info, make_row

from ncclbench.core.config import BenchOptions
from ncclbench.core.results import RunSummary
from ncclbench.launch.shutdown import run_last_words
from ncclbench.store import ResultStore, StoreReporter
from ncclbench.store.db import SCHEMA_VERSION

# The schema ncclbench wrote before version 2 (src/ncclbench/store/db.py at 0e208b6).
V1_SCHEMA = """
CREATE TABLE runs (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at    TEXT NOT NULL,
    status        TEXT NOT NULL CHECK (status IN ('running', 'complete', 'interrupted')),
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
    writer_pid    INTEGER
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
"""


def _v1_store(path):
    c = sqlite3.connect(str(path))
    c.executescript(V1_SCHEMA)
    c.execute("PRAGMA user_version = 1")
    c.execute("INSERT INTO runs (created_at, status, source, program, collective, argv, env, info, options, "
              "hosts, gpus, nranks) VALUES ('2026-01-01', 'interrupted', 'ncclbench', 'all_reduce_perf', "
              "'all_reduce', '[]', '{}', ?, ?, '[]', '[]', 4)",
              (json.dumps(dataclasses.asdict(make_info())), json.dumps(dataclasses.asdict(BenchOptions()))))
    c.execute("INSERT INTO rows (run_id, seq, size, count, type, redop, root) VALUES (1, 0, 8, 2, 'float', 'sum', -1)")
    c.execute("INSERT INTO baselines VALUES ('old', 1, '2026-01-01', NULL)")
    c.commit()
    c.close()


def test_a_schema_1_store_is_upgraded_in_place_and_keeps_everything(tmp_path):
    db = tmp_path / "old.sqlite"
    _v1_store(db)
    with ResultStore(db) as s:
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
        run = s.get_run(1)
        assert run.status == "interrupted" and run.end_reason is None and len(run.rows) == 1
        assert s.get_baseline("old") == 1 and s.get_baseline_runs("old") == [1]
        rid = s.begin_run(make_info(), BenchOptions())
        assert s.mark_interrupted(rid, "-T 5 expired", status="timeout")
        assert s.get_run_header(rid).status == "timeout"
        assert s.conn.execute("PRAGMA foreign_key_check").fetchall() == []
        assert s.conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_reporter_outcome_timeout_with_reason(tmp_path):
    store = ResultStore(tmp_path / "r.sqlite")
    rep = StoreReporter(store)
    rep.begin(make_info(), BenchOptions())
    rep.row(make_row(1024, 1.0))
    rep.set_outcome("timeout", "Test timeout (5s): rank 1 waited longer than -T 5 s")
    rep.set_outcome("interrupted", "a second opinion is ignored")
    rep.close()
    run = store.get_run(rep.run_id)
    assert (run.status, run.end_reason, len(run.rows)) == (
        "timeout", "Test timeout (5s): rank 1 waited longer than -T 5 s", 1)


def test_last_words_mark_the_run_from_another_thread(tmp_path):
    """What a thread ending the process (signal watcher, -T watchdog) writes: the
    reporter's own connection belongs to the main thread, so it opens one."""
    store = ResultStore(tmp_path / "r.sqlite")
    rep = StoreReporter(store)
    rep.begin(make_info(), BenchOptions())
    rep.row(make_row(8, 1.0))
    t = threading.Thread(target=run_last_words, args=("interrupted", "SIGTERM received by rank 0"))
    t.start()
    t.join()
    run = store.get_run(rep.run_id)
    assert (run.status, run.end_reason) == ("interrupted", "SIGTERM received by rank 0")
    rep.close()  # nothing left to say; a finished reporter registers no last words
    run_last_words("timeout", "too late")
    assert store.get_run(rep.run_id).status == "interrupted"


def test_a_finished_run_is_never_turned_into_interrupted(tmp_path):
    store = ResultStore(tmp_path / "r.sqlite")
    rep = StoreReporter(store)
    rep.begin(make_info(), BenchOptions())
    rep.end(RunSummary(0, 1.0, None, None))
    run_last_words("interrupted", "SIGTERM after the end")
    rep.close()
    assert not store.mark_interrupted(rep.run_id, "late")
    store.set_end_reason(rep.run_id, "late", "interrupted")
    h = store.get_run_header(rep.run_id)
    assert (h.status, h.end_reason) == ("complete", None)


def test_baselines_of_several_runs(tmp_path):
    with ResultStore(tmp_path / "r.sqlite") as s:
        ids = []
        for _ in range(4):
            rid = s.begin_run(make_info(), BenchOptions(argv=["-b", "8"]))
            s.finish_run(rid, None)
            ids.append(rid)
        other = s.begin_run(make_info(), BenchOptions(argv=["-b", "16"]))
        s.finish_run(other, None)
        s.set_baseline("good", [ids[2], ids[0], ids[1]])
        assert s.get_baseline("good") == ids[2]  # the newest is the reference
        assert s.get_baseline_runs("good") == ids[:3]
        s.set_baseline("good", ids[3])  # setting it again replaces the set
        assert s.get_baseline_runs("good") == [ids[3]]
        s.delete_baseline("good")
        assert s.get_baseline_runs("good") == []


def test_show_and_history_say_why_a_run_ended(tmp_path, capsys):
    from ncclbench.commands import main as ncclbench_main

    db = tmp_path / "r.sqlite"
    with ResultStore(db) as s:
        rid = s.begin_run(make_info(), BenchOptions())
        s.add_row(rid, 0, make_row(8, 1.0))
        s.mark_interrupted(rid, "SIGTERM received by rank 2 (host n1, pid 77)")
    assert ncclbench_main(["show", str(rid), "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert f"run {rid} is interrupted (1 rows recorded): SIGTERM received by rank 2 (host n1, pid 77)" in err
    assert ncclbench_main(["history", "--format", "json", "--db", str(db)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc[0]["status"] == "interrupted" and doc[0]["end_reason"].startswith("SIGTERM received by rank 2")


def test_a_schema_2_store_gains_the_failed_status_and_keeps_everything(tmp_path):
    """Schema 3 lets an imported failed run be stored as 'failed'; a schema-2 store is rebuilt in place."""
    from ncclbench.store import db as dbmod

    path = tmp_path / "v2.sqlite"
    with ResultStore(path) as s:
        rid = s.begin_run(make_info(), BenchOptions())
        s.set_baseline("keep", rid)
    c = sqlite3.connect(str(path))  # make it what ncclbench wrote before schema 3: the old CHECK, version 2
    sql = c.execute("SELECT sql FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
    old = sql.replace(", 'failed')", ")").replace("CREATE TABLE runs", "CREATE TABLE runs_old")
    c.executescript(f"PRAGMA foreign_keys = OFF; {old}; INSERT INTO runs_old SELECT * FROM runs; DROP TABLE runs; "
                    "ALTER TABLE runs_old RENAME TO runs; PRAGMA user_version = 2;")
    c.close()
    with pytest.raises(sqlite3.IntegrityError):
        c = sqlite3.connect(str(path))
        c.execute("UPDATE runs SET status = 'failed' WHERE id = ?", (rid,))
    c.close()
    with ResultStore(path) as s:
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == dbmod.SCHEMA_VERSION
        assert s.get_baseline("keep") == rid and s.get_run(rid).status == "running"
        new = s.begin_run(make_info(), BenchOptions())
        s.finish_run(new, None, status="failed")
        assert s.get_run_header(new).status == "failed"
        assert s.conn.execute("PRAGMA foreign_key_check").fetchall() == []

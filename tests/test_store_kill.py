"""kill -9 while writing: the database stays valid and keeps what was committed."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import ncclbench
from ncclbench.core.config import BenchOptions
from ncclbench.core.results import RunInfo
from ncclbench.store import ResultStore

SRC = str(Path(ncclbench.__file__).resolve().parents[1])

_COMMON = """
import math, sys
from ncclbench.core.config import BenchOptions
from ncclbench.core.results import DeviceInfo, HalfResult, ResultRow, RunInfo
from ncclbench.store import ResultStore, StoreReporter
info = RunInfo(program="all_reduce_perf", argv=["x"], backend="nccl", version="0",
               nccl_version_code=22809, nccl_headers_code=22803, library="nccl",
               devices=[DeviceInfo(0, 0, 1, "h", 0, "0000:00:06", "GPU")])
def row(i):
    h = HalfResult(1.0 + i, math.nan, 2.0, 3.0 + i, 0)
    return ResultRow(size=8 * (i + 1), count=2 * (i + 1), type="float", redop="sum", root=-1,
                     out_of_place=h, in_place=h)
"""


def _start(script: str, db: Path) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(_COMMON) + textwrap.dedent(script),
                             str(db)], stdout=subprocess.PIPE, text=True, env=env)


def _check_integrity(db: Path) -> sqlite3.Connection:
    c = sqlite3.connect(str(db))
    assert c.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert c.execute("PRAGMA foreign_key_check").fetchall() == []
    return c


def test_kill_9_during_row_writes_keeps_committed_rows(tmp_path):
    db = tmp_path / "r.sqlite"
    for attempt, kill_after in enumerate((50, 137, 311)):
        p = _start("""
            store = ResultStore(sys.argv[1])
            rep = StoreReporter(store)
            rep.begin(info, BenchOptions())
            print("run", rep.run_id, flush=True)
            i = 0
            while True:
                rep.row(row(i))
                print(i, flush=True)   # printed only after the row's transaction committed
                i += 1
            """, db)
        run_id = int(p.stdout.readline().split()[1])
        last = -1
        while last < kill_after:
            last = int(p.stdout.readline())
        os.kill(p.pid, signal.SIGKILL)  # the writer is busy inserting the next rows
        p.wait()
        p.stdout.close()
        c = _check_integrity(db)
        n = c.execute("SELECT count(*) FROM rows WHERE run_id = ?", (run_id,)).fetchone()[0]
        seqs = [r[0] for r in c.execute("SELECT seq FROM rows WHERE run_id = ? ORDER BY seq",
                                        (run_id,))]
        c.close()
        assert n >= last + 1
        assert seqs == list(range(n))  # no gaps, no half rows
        with ResultStore(db, create=False) as s:
            run = s.get_run(run_id)
            assert run.status == "interrupted"  # its writer is gone
            assert run.rows[last].out_of_place.busbw == 3.0 + last
            assert s.count_runs() == attempt + 1


def test_kill_9_inside_an_import_transaction_leaves_no_trace(tmp_path):
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as s:  # something already stored must survive
        keep = s.begin_run(RunInfo("all_reduce_perf", [], "nccl", "0", None, None, ""),
                           BenchOptions(), status="complete")
    p = _start("""
        store = ResultStore(sys.argv[1])
        orig = store.add_row
        def add_row(run_id, seq, r):
            orig(run_id, seq, r)
            if seq % 500 == 0:
                print(seq, flush=True)
        store.add_row = add_row
        with store.transaction():
            rid = store.begin_run(info, BenchOptions(), status="running")
            for i in range(10**7):
                store.add_row(rid, i, row(i))
        """, db)
    while int(p.stdout.readline()) < 3000:
        pass
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    p.stdout.close()
    c = _check_integrity(db)
    assert c.execute("SELECT id FROM runs").fetchall() == [(keep,)]
    assert c.execute("SELECT count(*) FROM rows").fetchone()[0] == 0
    c.close()
    with ResultStore(db, create=False) as s:  # and it is writable again
        rid = s.begin_run(RunInfo("x_perf", [], "nccl", "0", None, None, ""), BenchOptions())
        assert s.count_runs() == 2 and rid != keep

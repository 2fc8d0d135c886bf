"""The SQLite result store: schema, round trips, the live-run reporter, bad stores."""

from __future__ import annotations

import dataclasses
import io
import math
import sqlite3
from pathlib import Path

import pytest
from gate_helpers import one_run_limit_pct

from ncclbench.core.config import BenchOptions
from ncclbench.core.errors import ArgumentError, BenchError, ExitCode
from ncclbench.core.results import DeviceInfo, HalfResult, PerIterStats, ResultRow, RunInfo, RunSummary
from ncclbench.store import ResultStore, StoreReporter, default_db_path, env_that_matters
from ncclbench.store.db import SCHEMA_VERSION

FIX = Path(__file__).parent / "fixtures" / "nccl_tests_output"


def make_info(n: int = 2) -> RunInfo:
    devs = [DeviceInfo(rank=i, group=0, pid=100 + i, hostname=f"node{i}", device=i,
                       device_hex=f"0000:00:0{i}", device_info="NVIDIA H200", process=i)
            for i in range(n)]
    return RunInfo(program="all_reduce_perf", argv=["ncclbench", "all_reduce_perf", "-b", "8"],
                   backend="nccl", version="0.1.0", nccl_version_code=22809,
                   nccl_headers_code=22803, library="libnccl 2.28.9", devices=devs, world_size=n,
                   nranks=n, start_time="2026-11-21 08:00:00", hosts=[d.hostname for d in devs],
                   extra={"python": "3.11"})


def make_row(size: int, busbw: float, per_iter: bool = False, wrong_ip: int | None = 0) -> ResultRow:
    t = size / (busbw * 1e3) if busbw else 5.0
    pi = PerIterStats(skipped_iterations=1, min_us=t * 0.9, max_us=t * 1.2, avg_us=t, p50_us=t,
                      p95_us=t * 1.1, p99_us=t * 1.2, stdev_us=t * 0.05, cv_pct=5.0,
                      times_us=[t * 1.2, t, t * 0.9], per_process_max_times_us=[[t, t], [t, t * 1.1]]) \
        if per_iter else None
    return ResultRow(size=size, count=size // 4, type="float", redop="sum", root=-1,
                     out_of_place=HalfResult(t, math.nan, busbw / 1.5, busbw, 0, pi),
                     in_place=HalfResult(t * 1.01, t * 0.5, busbw / 1.5, busbw * 0.99, wrong_ip),
                     timestamp="2026-11-21 08:00:01")


def test_default_path_follows_env_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("NCCLBENCH_DB", str(tmp_path / "x.sqlite"))
    assert default_db_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("NCCLBENCH_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "ncclbench" / "results.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_db_path() == tmp_path / "home" / ".local" / "share" / "ncclbench" / "results.sqlite"


def test_env_that_matters_keeps_only_nccl_and_cuda():
    env = {"NCCL_DEBUG": "INFO", "CUDA_VISIBLE_DEVICES": "0,1", "HOME": "/root", "AWS_SECRET": "x",
           "NCCL_TESTS_MIN_BW": "100"}
    assert env_that_matters(env) == {"CUDA_VISIBLE_DEVICES": "0,1", "NCCL_DEBUG": "INFO",
                                     "NCCL_TESTS_MIN_BW": "100"}


def test_new_store_has_schema_wal_and_foreign_keys(tmp_path):
    path = tmp_path / "sub" / "r.sqlite"
    with ResultStore(path) as s:
        assert s.conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert s.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert s.conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        with pytest.raises(sqlite3.IntegrityError):
            s.conn.execute("INSERT INTO rows (run_id, seq, size, count, type, redop, root) "
                           "VALUES (999, 0, 8, 2, 'float', 'sum', -1)")
    # reopening an existing store keeps it
    with ResultStore(path) as s:
        assert s.count_runs() == 0


def test_run_round_trip_keeps_everything(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    monkeypatch.setenv("SECRET_TOKEN", "nope")
    info = make_info()
    opts = BenchOptions(min_bytes=8, max_bytes=1 << 20, step_factor=2, per_iter_timing=True,
                        datatypes=["float", "half"], argv=["-b", "8"])
    rows = [make_row(1 << k, 10.0 * k, per_iter=True, wrong_ip=None if k % 2 else 3)
            for k in range(3, 8)]
    summary = RunSummary(out_of_bounds=0, avg_busbw=12.5, min_bw_gate=None, gate_ok=None,
                         memory_line="# GPU memory usage : x")
    with ResultStore(tmp_path / "r.sqlite") as s:
        rid = s.begin_run(info, opts)
        for i, r in enumerate(rows):
            s.add_row(rid, i, r)
        s.add_message(rid, "# Reducing maxBytes to 1024 due to memory limitation")
        s.finish_run(rid, summary)
        got = s.get_run(rid)
    assert got.status == "complete"
    assert got.info == info
    assert got.options == opts
    assert got.summary == summary
    assert "SECRET_TOKEN" not in got.env and got.env.get("NCCL_ALGO") == "Ring"
    assert got.messages == ["# Reducing maxBytes to 1024 due to memory limitation"]
    assert len(got.rows) == len(rows)
    for a, b in zip(rows, got.rows):
        # NaN != NaN, so compare the dict forms with NaN made comparable
        da, db = dataclasses.asdict(a), dataclasses.asdict(b)
        assert _nan_free(da) == _nan_free(db)


def _nan_free(x):
    if isinstance(x, dict):
        return {k: _nan_free(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_nan_free(v) for v in x]
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    return x


def test_reporter_complete_run(tmp_path):
    store = ResultStore(tmp_path / "r.sqlite")
    rep = StoreReporter(store)
    rep.begin(make_info(), BenchOptions())
    assert store.get_run(rep.run_id).status == "running"
    rep.message("# note")
    rep.row(make_row(1024, 1.0))
    # each row is committed as it arrives: a second connection sees it at once
    other = sqlite3.connect(str(tmp_path / "r.sqlite"))
    assert other.execute("SELECT count(*) FROM rows").fetchone()[0] == 1
    rep.row(make_row(2048, 2.0))
    rep.end(RunSummary(0, 1.5, None, None))
    rep.close()
    rep.close()  # idempotent
    run = store.get_run(rep.run_id)
    assert run.status == "complete" and [r.size for r in run.rows] == [1024, 2048]
    assert run.summary.avg_busbw == 1.5
    other.close()


def test_reporter_close_without_end_marks_interrupted(tmp_path):
    store = ResultStore(tmp_path / "r.sqlite")
    rep = StoreReporter(store)
    rep.begin(make_info(), BenchOptions())
    rep.row(make_row(1024, 1.0))
    rep.close()
    run = store.get_run(rep.run_id)
    assert run.status == "interrupted" and len(run.rows) == 1 and run.summary is None


def test_reporter_store_failure_warns_once_and_keeps_quiet(tmp_path):
    store = ResultStore(tmp_path / "r.sqlite")
    warn = io.StringIO()
    rep = StoreReporter(store, warn=warn)
    rep.begin(make_info(), BenchOptions())
    store.conn.close()  # the store breaks mid-run
    rep.row(make_row(1024, 1.0))
    rep.row(make_row(2048, 1.0))
    rep.end(RunSummary(0, 1.0, None, None))
    rep.close()
    lines = warn.getvalue().splitlines()
    assert len(lines) == 1 and "result store" in lines[0] and "disabled" in lines[0]
    assert rep.error


def test_running_run_of_dead_writer_reads_as_interrupted(tmp_path):
    with ResultStore(tmp_path / "r.sqlite") as s:
        rid = s.begin_run(make_info(), BenchOptions())
        assert s.get_run_header(rid).status == "running"  # this process is alive
        s.conn.execute("UPDATE runs SET writer_pid = 2147483646 WHERE id = ?", (rid,))
        assert s.get_run_header(rid).status == "interrupted"


def test_baselines_and_references(tmp_path):
    with ResultStore(tmp_path / "r.sqlite") as s:
        ids = [s.begin_run(make_info(), BenchOptions()) for _ in range(3)]
        s.set_baseline("h200", ids[0], note="first")
        assert s.get_baseline("h200") == ids[0]
        s.set_baseline("h200", ids[1])  # moves
        assert s.list_baselines()[0][:2] == ("h200", ids[1])
        assert s.resolve("h200") == ids[1]
        assert s.resolve("latest") == ids[2]
        assert s.resolve("latest~2") == ids[0]
        assert s.resolve(str(ids[1])) == ids[1]
        with pytest.raises(ArgumentError, match="unknown run 99"):
            s.resolve("99")
        with pytest.raises(ArgumentError, match="not a run id"):
            s.resolve("nosuchname")
        with pytest.raises(ArgumentError):
            s.set_baseline("42", ids[0])  # would shadow run ids
        with pytest.raises(ArgumentError):
            s.set_baseline("x", 12345)
        s.delete_baseline("h200")
        with pytest.raises(ArgumentError):
            s.delete_baseline("h200")


def test_empty_store_error_names_it(tmp_path):
    with ResultStore(tmp_path / "r.sqlite") as s:
        with pytest.raises(ArgumentError, match="is empty"):
            s.resolve("latest")


def test_missing_store_not_created_when_reading(tmp_path):
    path = tmp_path / "none.sqlite"
    with pytest.raises(BenchError, match="no result store"):
        ResultStore(path, create=False)
    assert not path.exists()


@pytest.mark.parametrize("content", [b"this is not a database at all\n" * 100, b"\x00\xff" * 3000])
def test_corrupt_file_is_one_line_error(tmp_path, content):
    path = tmp_path / "r.sqlite"
    path.write_bytes(content)
    with pytest.raises(BenchError) as e:
        ResultStore(path)
    assert e.value.code == ExitCode.ARGUMENT
    assert "not an ncclbench result store" in e.value.message and "\n" not in e.value.message
    assert path.read_bytes() == content  # left untouched


def test_foreign_sqlite_and_newer_schema_refused(tmp_path):
    foreign = tmp_path / "f.sqlite"
    c = sqlite3.connect(str(foreign))
    c.execute("CREATE TABLE t (x)")
    c.commit()
    c.close()
    with pytest.raises(BenchError, match="not an ncclbench result store"):
        ResultStore(foreign)
    newer = tmp_path / "n.sqlite"
    ResultStore(newer).close()
    c = sqlite3.connect(str(newer))
    c.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    c.commit()
    c.close()
    with pytest.raises(BenchError, match="newer|upgrade"):
        ResultStore(newer)


def test_transaction_rolls_back_on_error(tmp_path):
    with ResultStore(tmp_path / "r.sqlite") as s:
        with pytest.raises(RuntimeError):
            with s.transaction():
                rid = s.begin_run(make_info(), BenchOptions())
                s.add_row(rid, 0, make_row(8, 1.0))
                raise RuntimeError("boom")
        assert s.count_runs() == 0
        assert s.conn.execute("SELECT count(*) FROM rows").fetchone()[0] == 0


def test_reporter_open_on_unusable_path_warns_and_lets_the_run_go_on(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    warn = io.StringIO()
    rep = StoreReporter.open(blocker / "sub" / "r.sqlite", warn=warn)  # parent is a file
    rep.begin(make_info(), BenchOptions())
    rep.row(make_row(8, 1.0))
    rep.end(RunSummary(0, 1.0, None, None))
    rep.close()
    assert rep.run_id is None and "not saving this run" in warn.getvalue()
    assert len(warn.getvalue().splitlines()) == 1
    with pytest.raises(BenchError, match="not stored"):
        rep.check_baseline("ref")


def test_reporter_records_versions_and_gates_against_a_baseline(tmp_path):
    path = tmp_path / "r.sqlite"
    rows = [make_row(1 << k, 100.0 if k >= 26 else 1.0) for k in range(3, 30)]
    base = StoreReporter.open(path)
    base.begin(make_info(), BenchOptions())
    for r in rows:
        base.row(r)
    base.end(RunSummary(0, 1.0, None, None))
    base.close()
    with ResultStore(path) as s:
        s.set_baseline("ref", base.run_id)
        info = s.get_run(base.run_id).info
    assert info.extra["python"] and info.extra["ncclbench"] and info.extra["platform"]
    assert info.extra["python"] and make_info().extra.items() <= info.extra.items()

    slow = StoreReporter.open(path)
    slow.begin(make_info(), BenchOptions())
    for r in rows:  # busbw -20% from 8 MiB up, the plateau (within a factor of 4 of 512 MiB) among them
        f = 0.8 if r.size >= 1 << 23 else 1.0
        r = dataclasses.replace(r, out_of_place=dataclasses.replace(
            r.out_of_place, busbw=r.out_of_place.busbw * f, time_us=r.out_of_place.time_us / f))
        slow.row(r)
    slow.end(RunSummary(0, 1.0, None, None))
    slow.close()
    out = io.StringIO()
    assert slow.check_baseline("ref", 5.0, out=out) == 7
    assert "REGRESSION at sizes " + ", ".join(str(1 << k) for k in range(28, 30)) in out.getvalue()
    out = io.StringIO()
    assert base.check_baseline("ref", 20.0, out=out) == 0 and "result: OK" in out.getvalue()
    out = io.StringIO()  # one GPU run, asked for half the drop its prior lets it see: cannot confirm, and says so
    assert base.check_baseline("ref", one_run_limit_pct() / 2, out=out) == 9
    assert "result: NOT JUDGED: cannot confirm" in out.getvalue()
    with pytest.raises(ArgumentError, match="no baseline named"):
        base.check_baseline("nope")


def test_platform_text_is_platform_platform_without_its_cost():
    import platform

    from ncclbench.store.reporter import platform_text

    assert platform_text() == platform.platform()

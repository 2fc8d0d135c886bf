"""Importing real nccl-tests output (tests/fixtures/nccl_tests_output, copied from shared/reference)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from ncclbench.commands.show import show_text
from ncclbench.core.errors import BenchError, ExitCode
from ncclbench.output.jsonout import repair_json
from ncclbench.store import ResultStore, store_imported
from ncclbench.store.importers import load_file, parse_text_log
from ncclbench.store.jsonlog import parse_json_bytes

FIX = Path(__file__).parent / "fixtures" / "nccl_tests_output"
TEXT_FIXTURES = sorted(FIX.glob("*.txt"))
JSON_FIXTURE = FIX / "all_reduce_4proc_per_iter.json"
ROW_RE = re.compile(r"^\s+\d+\s+\d+\s+\w+")


def _table_rows(path: Path) -> list[list[str]]:
    return [ln.split() for ln in path.read_text().splitlines() if ROW_RE.match(ln)]


@pytest.mark.parametrize("path", TEXT_FIXTURES, ids=lambda p: p.name)
def test_text_fixture_rows_match_the_file(path):
    runs = load_file(path)
    assert len(runs) == 1
    run = runs[0]
    table = _table_rows(path)
    assert len(run.rows) == len(table) > 0
    for row, cells in zip(run.rows, table):
        assert row.size == int(cells[0]) and row.count == int(cells[1])
        assert row.type == cells[2] and row.redop == cells[3] and row.root == int(cells[4])
        assert math.isclose(row.out_of_place.time_us, float(cells[5]))
        assert math.isclose(row.out_of_place.busbw, float(cells[7]))
        wrong = cells[8]
        assert row.out_of_place.wrong == (None if wrong == "N/A" else int(wrong))
    text = path.read_text()
    assert run.info.program == re.search(r"Collective test starting: (\S+)", text).group(1)
    ndev = len(re.findall(r"^#  Rank", text, re.M))
    assert len(run.info.devices) == ndev and run.info.nranks == ndev
    assert run.info.world_size == len(set(re.findall(r"Pid\s+(\d+)", text)))
    has_footer = "# Avg bus bandwidth" in text
    assert run.status == ("complete" if has_footer else "interrupted")
    if has_footer:
        avg = float(re.search(r"# Avg bus bandwidth\s+:\s+(\S+)", text).group(1))
        assert run.summary.avg_busbw == avg and run.summary.out_of_bounds == 0
    else:
        assert run.summary is None


@pytest.mark.parametrize("path", TEXT_FIXTURES, ids=lambda p: p.name)
def test_text_round_trip_reprints_the_log(path):
    """Import then re-render: the nccl-tests table comes back byte for byte."""
    run = load_file(path)[0]
    out = show_text(run)
    assert out.rstrip("\n") == path.read_text().rstrip("\n")


def test_per_iteration_text_columns():
    run = load_file(FIX / "all_reduce_4proc_per_iter.txt")[0]
    assert run.options.per_iter_timing and run.options.iters == 50 and run.options.step_factor == 8
    assert run.options.output_file == "all_reduce_4proc_per_iter.json"
    first = run.rows[0]
    assert (first.out_of_place.per_iter.min_us, first.out_of_place.per_iter.max_us,
            first.out_of_place.per_iter.p99_us, first.out_of_place.per_iter.cv_pct) == \
        (10.08, 21.92, 21.92, 14.49)
    assert first.in_place.per_iter.cv_pct == 6.23


def test_nocheck_log_has_unchecked_halves():
    run = load_file(FIX / "all_reduce_4proc_nocheck.txt")[0]
    assert run.options.check == 0
    assert all(r.out_of_place.wrong is None and r.in_place.wrong is None for r in run.rows)


def test_json_fixture_keeps_per_iteration_and_per_process_data():
    doc = json.loads(JSON_FIXTURE.read_text())
    run = load_file(JSON_FIXTURE)[0]
    assert run.status == "complete" and run.source == "import:json"
    assert len(run.rows) == len(doc["results"])
    assert run.info.argv == doc["args"] and run.info.program == "all_reduce_perf"
    assert run.info.nccl_version_code == doc["nccl_version"]
    assert run.env == {k: v for k, v in (e.split("=", 1) for e in doc["env"])
                       if k.startswith(("NCCL_", "CUDA_"))}
    assert "OMPI_ALLOW_RUN_AS_ROOT" not in run.env
    assert len(run.info.devices) == len(doc["config"]["devices"]) and run.info.nranks == 4
    for row, res in zip(run.rows, doc["results"]):
        assert row.size == res["size"] and row.root == int(res["root"])
        assert row.out_of_place.time_us == res["out_of_place"]["time"]
        pi = row.out_of_place.per_iter
        src = res["out_of_place_per_iter"]
        assert pi.times_us == src["times_us"] and pi.cv_pct == src["cv_pct"]
        assert pi.per_process_max_times_us == src["per_process_max_times_us"]
    assert run.summary.avg_busbw == doc["average_bus_bandwidth"]["bandwidth"]
    assert run.summary.gate_ok is None  # "unchecked"


def test_json_and_text_of_the_same_run_agree():
    t = load_file(FIX / "all_reduce_4proc_per_iter.txt")[0]
    j = load_file(JSON_FIXTURE)[0]
    assert [r.size for r in t.rows] == [r.size for r in j.rows]
    for a, b in zip(t.rows, j.rows):
        assert abs(a.out_of_place.time_us - b.out_of_place.time_us) <= 0.005 + 1e-9
        assert abs(a.out_of_place.per_iter.max_us - b.out_of_place.per_iter.max_us) <= 0.005 + 1e-6


def test_json_cut_anywhere_imports_as_interrupted_or_refuses_cleanly():
    data = JSON_FIXTURE.read_bytes()
    full = len(load_file(JSON_FIXTURE)[0].rows)
    seen_partial = set()
    for cut in range(200, len(data), 151):
        try:
            run = parse_json_bytes(data[:cut], "cut.json")
        except BenchError as e:  # cut before the first complete row
            assert e.code == ExitCode.ARGUMENT and "\n" not in e.message
            assert b'"in_place_per_iter"' not in data[:cut] or b'"actual_iterations"' not in data[:cut]
            continue
        assert run.status == "interrupted" and run.summary is None
        assert 1 <= len(run.rows) <= full
        seen_partial.add(len(run.rows))
    assert len(seen_partial) >= full - 1  # rows appear one by one as the cut moves on


def test_repair_json_closes_containers_and_fixes_bare_inf():
    fixed, cut = repair_json('{"a":[1,2,{"b":"x,]"}],"c":{"d":inf,"e":-nan,"f":12')
    assert cut and json.loads(fixed)["a"] == [1, 2, {"b": "x,]"}]
    doc = json.loads(fixed)
    assert doc["c"]["d"] == math.inf and math.isnan(doc["c"]["e"]) and "f" not in doc["c"]
    fixed, cut = repair_json('{"a":1}')
    assert not cut and json.loads(fixed) == {"a": 1}
    with pytest.raises(ValueError):
        repair_json('{"a":1]}')


def test_concatenated_log_with_nccl_info_noise_gives_one_run_per_test():
    parts = [FIX / "all_reduce_1proc_4gpu.txt", FIX / "all_gather_1proc_4gpu.txt",
             FIX / "sendrecv_1proc_4gpu.txt"]
    noise = "vm:1631:1631 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n" \
            "vm:1631:1640 [1] NCCL INFO Channel 00/24 : 0 1 2 3\n"
    text = ""
    for p in parts:
        lines = p.read_text().splitlines(keepends=True)
        text += "".join(lines[:6]) + noise + "".join(lines[6:])
    runs = parse_text_log(text, "combined.log")
    assert [r.info.program for r in runs] == ["all_reduce_perf", "all_gather_perf", "sendrecv_perf"]
    for r, p in zip(runs, parts):
        assert len(r.rows) == len(_table_rows(p)) and r.status == "complete"
        assert r.ntests == 3
    assert [r.label for r in runs] == ["combined.log#1", "combined.log#2", "combined.log#3"]
    assert len({r.content_hash for r in runs}) == 3


def test_log_cut_mid_row_keeps_complete_rows():
    text = (FIX / "all_reduce_1proc_4gpu.txt").read_text()
    cut = text.index("    16777216")
    partial = text[:cut] + "    16777216       4194304     float     sum      -1   100.73  166"
    run = parse_text_log(partial, "cut.txt")[0]
    assert run.status == "interrupted" and run.rows[-1].size == 8388608


def test_hypercube_empty_op_and_timestamps_and_cputime():
    """Layouts without a fixture: -S timestamps, -C cputime, hypercube's empty op column."""
    head = ("# nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22809\n"
            "# Collective test starting: hypercube_perf\n"
            "# nThread 1 nGpus 4 minBytes 1024 maxBytes 2048 step: 2(factor) warmup iters: 1 "
            "iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0\n#\n# Using devices\n"
            "#  Rank  0 Group  0 Pid   1631 on         vm device  0 [0000:00:06] NVIDIA H200\n#\n"
            "#                                                              out-of-place                       in-place          \n"
            "#       size         count      type   redop    root  cputime   algbw   busbw  #wrong  cputime   algbw   busbw  #wrong            timestamp\n"
            "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)          %Y-%m-%d %H:%M:%S\n")
    rows = ("        1024            64     float              -1     5.10    0.20    0.60       0     5.00    0.20    0.61       0  2026-11-21 07:48:14\n"
            "        2048           128     float              -1     5.20    0.39    1.18       0     5.10    0.40    1.20       0  2026-11-21 07:48:15\n")
    run = parse_text_log(head + rows, "hc.txt")[0]
    assert run.options.report_cputime and run.options.report_timestamps
    assert [r.redop for r in run.rows] == ["", ""]
    assert run.rows[1].timestamp == "2026-11-21 07:48:15"
    assert run.rows[0].out_of_place.cpu_time_us == 5.10 and run.info.start_time == "2026-11-21 07:48:14"
    assert run.status == "interrupted"
    out = show_text(run)
    assert out.splitlines()[-2:] == rows.splitlines()


@pytest.mark.parametrize("content,needle", [
    (b"", "empty"),
    (b"   \n\n", "empty"),
    (b"# My notes\nall_reduce was fast today\n", "not an nccl-tests"),
    (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 20, "binary"),
    (b'{"name": "some other tool", "values": [1, 2, 3]}', "not nccl-tests"),
    (b'[1, 2, 3]', "not nccl-tests"),
    (b'{"version":3,"config":{},"results":[]}', "without a single complete"),
    (b'{"version":3,"results":[{"size":8}}', "not valid JSON"),
])
def test_bad_files_give_one_line_errors_and_write_nothing(tmp_path, content, needle):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as s:
        good = load_file(FIX / "broadcast_1proc_4gpu.txt")
        store_imported(s, good)
        before = s.count_runs()
    with pytest.raises(BenchError) as e:
        load_file(bad)
    assert needle in e.value.message and "\n" not in e.value.message
    assert e.value.code == ExitCode.ARGUMENT
    with ResultStore(db) as s:
        assert s.count_runs() == before


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(BenchError, match="no such file"):
        load_file(tmp_path / "nope.txt")
    with pytest.raises(BenchError, match="directory"):
        load_file(tmp_path)


def test_store_imported_is_atomic_and_deduplicates(tmp_path):
    runs = load_file(FIX / "all_reduce_1proc_4gpu.txt") + load_file(JSON_FIXTURE)
    with ResultStore(tmp_path / "r.sqlite") as s:
        first = store_imported(s, runs)
        assert [new for _, _, new in first] == [True, True]
        again = store_imported(s, runs)
        assert [(rid, new) for _, rid, new in again] == [(rid, False) for _, rid, _ in first]
        assert s.count_runs() == 2
        stored = s.get_run(first[1][1])
        assert stored.source == "import:json" and stored.status == "complete"
        assert stored.rows[0].out_of_place.per_iter.times_us == runs[1].rows[0].out_of_place.per_iter.times_us
        assert stored.source_path == str(JSON_FIXTURE.resolve())
        # a failure in the middle of a multi-run import leaves nothing behind
        more = load_file(FIX / "alltoall_1proc_4gpu.txt") + load_file(FIX / "sendrecv_1proc_4gpu.txt")
        more[1].rows[3].out_of_place = None  # makes the second run's 4th row fail
        with pytest.raises(AttributeError):
            store_imported(s, more)
        assert s.count_runs() == 2


def test_mangled_inputs_never_escape_as_tracebacks(tmp_path):
    """Randomly damaged fixtures either import (and store) or give a BenchError."""
    import random

    rnd = random.Random(7)
    files = TEXT_FIXTURES + [JSON_FIXTURE]
    inserts = [b"N/A", b" ", b"\n", b"-1", b"#", b":", b"nan", b"inf", b"1e+99", b"{", b"]",
               b'"', b",", b"99999999999999999999999"]
    imported = refused = 0
    with ResultStore(tmp_path / "r.sqlite") as store:
        for i in range(300):
            data = bytearray(rnd.choice(files).read_bytes())
            for _ in range(rnd.randint(1, 12)):
                k = rnd.randrange(len(data))
                op = rnd.random()
                if op < 0.4:
                    data[k] = rnd.randrange(256)
                elif op < 0.7:
                    del data[k:k + rnd.randint(1, 60)]
                else:
                    data[k:k] = rnd.choice(inserts)
            f = tmp_path / f"m{i}.log"
            f.write_bytes(bytes(data))
            try:
                runs = load_file(f)
            except BenchError as e:
                assert "\n" not in e.message
                refused += 1
                continue
            store_imported(store, runs)
            for _, rid, _ in store_imported(store, runs):
                got = store.get_run(rid)
                show_text(got)
            imported += 1
        assert store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert imported > 50 and refused > 5

"""nccl-tests' -J output (docs/behaviour.md §6): schema v3, key order, encoding quirks."""

import json
import os
import re
import sys
from pathlib import Path

import pytest

from ncclbench.core.config import BenchOptions
from ncclbench.core.errors import ArgumentError, ExitCode
from ncclbench.core.results import PerIterStats, RunSummary
from ncclbench.output.jsonout import JsonReporter, json_double, json_str, recover_json, redact_env

sys.path.insert(0, str(Path(__file__).resolve().parent))
from output_helpers import h200, half, make_info, make_row, read_fixture, run_from_json_fixture  # noqa: E402


class Clock:
    def __init__(self, *stamps):
        self.stamps = list(stamps)

    def __call__(self):
        return self.stamps.pop(0)


def run_json(tmp_path, opts, rows, summary=None, info=None, env=(), clock=None, name="out.json"):
    rep = JsonReporter(str(tmp_path / name), opts, env=list(env),
                       clock=clock or Clock("2026-01-01 00:00:00", "2026-01-01 00:00:01"))
    rep.begin(info or make_info(), opts)
    for r in rows:
        rep.row(r)
    if summary is not None:
        rep.end(summary)
    rep.close()
    return rep, (tmp_path / name).read_text()


# ---------------------------------------------------------------- golden


def test_golden_per_iter_json(tmp_path):
    """Re-create all_reduce_4proc_per_iter.json from its own values.

    The stored fixture was re-serialised by Python (json.dumps, separators
    without spaces), so our raw bytes are checked for nccl-tests' encoding and
    then, re-serialised the same way, must equal the fixture byte for byte
    (env, times and args are injected from the fixture; "ncclbench" is ours).
    """
    doc, info, opts, rows, summary = run_from_json_fixture()
    rep, raw = run_json(tmp_path, opts, rows, summary, info=info, env=doc["env"],
                        clock=Clock(doc["start_time"], doc["end_time"]))
    # nccl-tests encoding: one line, no whitespace outside strings, no newline at the end
    assert "\n" not in raw and not raw.endswith("\n")
    outside = re.sub(r'"(?:[^"\\]|\\.)*"', '""', raw)
    assert " " not in outside
    assert '"args":[".\\/build\\/all_reduce_perf","-b","8"' in raw
    numbers = re.findall(r"(?<=[:,\[])-?\d+\.\d+(?=[,\]}])", outside)
    assert numbers and all(len(n.split(".")[1]) == 6 for n in numbers)
    assert '"nwrong":0.000000' in raw and '"root":"    -1"' in raw
    ours = json.loads(raw)
    assert list(ours)[-2:] == ["end_time", "ncclbench"]
    extra = ours.pop("ncclbench")
    assert json.dumps(ours, separators=(",", ":")) == read_fixture("all_reduce_4proc_per_iter.json")
    assert extra["completed"] is True and extra["backend"] == "nccl"
    assert extra["options"]["per_iter_timing"] is True


# ---------------------------------------------------------------- schema details


def test_schema_default_run(tmp_path):
    info = make_info(devices=[h200(r, 1631) for r in range(4)])  # one process, 4 GPUs
    opts = BenchOptions(argv=["all_reduce_perf", "-g", "4"], ngpus=4, step_factor=1, step_bytes=4096, check=0)
    row = make_row(oop=half(18.55, 0.000431, 0.000647, wrong=None), ip=half(19.93, wrong=None))
    _, raw = run_json(tmp_path, opts, [row], RunSummary(0, 0.00065, None, None), info=info)
    doc = json.loads(raw)
    assert list(doc) == ["version", "start_time", "args", "env", "nccl_version", "config", "results",
                         "out_of_bounds", "average_bus_bandwidth", "errors", "end_time", "ncclbench"]
    cfg = doc["config"]
    assert list(cfg) == ["nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "step_bytes", "warmup_iters",
                         "iterations", "aggregated_iterations", "validation", "graph", "blocking_collectives",
                         "per_iter_timing", "per_iter_skip", "parallel_init", "devices"]
    assert cfg["step_bytes"] == 4096 and cfg["validation"] == 0
    assert len(cfg["devices"]) == 1  # only the first device of each process
    res = doc["results"][0]
    assert list(res) == ["size", "count", "type", "redop", "root", "out_of_place", "in_place",
                         "actual_iterations", "experiment_name"]
    assert res["out_of_place"] == {"time": 18.55, "alg_bw": 0.000431, "bus_bw": 0.000647, "nwrong": None}
    assert '"alg_bw":0.000431,"bus_bw":0.000647,"nwrong":null' in raw
    assert res["actual_iterations"] == 20 and res["experiment_name"] == ""
    assert doc["out_of_bounds"] == {"count": 0, "okay": "true"}
    assert doc["average_bus_bandwidth"] == {"bandwidth": 0.00065, "okay": "unchecked"}
    assert '"errors":[""],"end_time":"2026-01-01 00:00:01"' in raw
    assert len(doc["ncclbench"]["devices"]) == 4


def test_cputime_key_gate_and_flags(tmp_path):
    opts = BenchOptions(report_cputime=True, blocking=2, parallel_init=True)
    row = make_row(oop=half(18.0, cpu=3.5))
    _, raw = run_json(tmp_path, opts, [row], RunSummary(2, 90.0, 100.0, None))
    doc = json.loads(raw)
    assert doc["results"][0]["out_of_place"]["cpu_time"] == 3.5
    assert "time" not in doc["results"][0]["out_of_place"]
    assert doc["config"]["blocking_collectives"] == "true" and doc["config"]["parallel_init"] == "true"
    assert doc["config"]["per_iter_timing"] == "false"
    assert doc["out_of_bounds"] == {"count": 2, "okay": "false"}
    assert doc["average_bus_bandwidth"]["okay"] == "true"  # 90 >= 0.9 * 100
    _, raw = run_json(tmp_path, opts, [row], RunSummary(0, 89.0, 100.0, None), name="b.json")
    assert json.loads(raw)["average_bus_bandwidth"]["okay"] == "false"
    assert json.loads(raw)["ncclbench"]["bandwidth_okay"] is False


def test_per_process_rows_only_with_several_processes(tmp_path):
    single = PerIterStats(0, 1.0, 2.0, 1.5, 1.5, 2.0, 2.0, 0.5, 33.3, [1.0, 2.0], [[1.0, 2.0]])
    multi = PerIterStats(1, 1.0, 2.0, 1.5, 1.5, 2.0, 2.0, 0.5, 33.3, [1.0, 2.0], [[1.0, 2.0], [0.5, 1.5]])
    opts = BenchOptions(per_iter_timing=True, per_iter_skip=1)
    rows = [make_row(oop=half(per_iter=single), ip=half(per_iter=multi))]
    _, raw = run_json(tmp_path, opts, rows, RunSummary(0, 0.0, None, None))
    res = json.loads(raw)["results"][0]
    assert list(res)[5:9] == ["out_of_place", "out_of_place_per_iter", "in_place", "in_place_per_iter"]
    assert "per_process_max_times_us" not in res["out_of_place_per_iter"]
    assert res["in_place_per_iter"]["per_process_max_times_us"] == [[1.0, 2.0], [0.5, 1.5]]
    assert res["in_place_per_iter"]["skipped_iterations"] == 1
    # without -I no per-iteration objects even if the harness had stats
    _, raw = run_json(tmp_path, BenchOptions(), rows, RunSummary(0, 0.0, None, None), name="n.json")
    assert "out_of_place_per_iter" not in raw


def test_string_encoding_quirks():
    assert json_str('a"b\\c/d\te\nf') == '"a\\"b\\\\c\\/d\\te\\nf"'
    assert json_str("caf\u00e9 au lait") == '"caf"'  # non-ASCII ends the string
    assert json_str("bell\x07rest") == '"bell"'
    assert json_str("x" * 5000) == '"' + "x" * 2047 + '"'
    assert json_str(None) == "null"
    assert json_double(5.4893) == "5.489300"
    assert json_double(float("nan")) == '"nan"'
    assert json_double(-0.0) == "-0.000000"
    assert json_double(1e20) == "100000000000000000000.000000"


def test_env_redaction(tmp_path):
    env = {"PATH": "/usr/bin", "HF_TOKEN": "hf_x", "AWS_SECRET_ACCESS_KEY": "s", "DB_PASSWD": "p",
           "API_KEY": "k", "MY_CREDENTIALS_FILE": "/c", "KEYBOARD": "us", "NCCL_DEBUG": "INFO"}
    entries, names = redact_env("%s=%s" % kv for kv in env.items())
    assert entries == ["PATH=/usr/bin", "HF_TOKEN=<redacted>", "AWS_SECRET_ACCESS_KEY=<redacted>",
                       "DB_PASSWD=<redacted>", "API_KEY=<redacted>", "MY_CREDENTIALS_FILE=<redacted>",
                       "KEYBOARD=us", "NCCL_DEBUG=INFO"]
    assert names == ["HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "DB_PASSWD", "API_KEY", "MY_CREDENTIALS_FILE"]
    rep = JsonReporter(str(tmp_path / "e.json"), BenchOptions(), env=env, clock=Clock("a", "b"))
    rep.close()
    doc = json.loads((tmp_path / "e.json").read_text())
    assert "HF_TOKEN=<redacted>" in doc["env"] and "hf_x" not in (tmp_path / "e.json").read_text()
    assert doc["ncclbench"]["env_redacted"] == names


def test_default_env_is_process_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NCCLBENCH_TEST_MARKER", "visible")
    monkeypatch.setenv("NCCLBENCH_TEST_TOKEN", "hidden")
    rep = JsonReporter(str(tmp_path / "d.json"), BenchOptions())
    rep.close()
    env = json.loads((tmp_path / "d.json").read_text())["env"]
    assert "NCCLBENCH_TEST_MARKER=visible" in env and "NCCLBENCH_TEST_TOKEN=<redacted>" in env


# ---------------------------------------------------------------- opening


def test_existing_file_never_overwritten(tmp_path):
    target = tmp_path / "ar.json"
    target.write_text("keep")
    first = JsonReporter(str(target), BenchOptions(), env=[])
    second = JsonReporter(str(target), BenchOptions(), env=[])
    assert (first.path, second.path) == (str(target) + ".0", str(target) + ".1")
    first.close()
    second.close()
    assert target.read_text() == "keep"
    assert json.loads((tmp_path / "ar.json.1").read_text())["version"] == 3


def test_unwritable_path_fails_before_the_run(tmp_path):
    with pytest.raises(ArgumentError) as err:
        JsonReporter(str(tmp_path / "missing" / "x.json"), BenchOptions())
    assert err.value.code == ExitCode.ARGUMENT == 255
    assert err.value.message == "cannot write JSON output to %s: No such file or directory" % (
        tmp_path / "missing" / "x.json")
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ArgumentError, match="Permission denied"):
            JsonReporter(str(locked / "x.json"), BenchOptions())


# ---------------------------------------------------------------- interruption


def test_interrupted_run_keeps_rows(tmp_path):
    path = tmp_path / "cut.json"
    rep = JsonReporter(str(path), BenchOptions(), env=["A=1"], clock=Clock("s", "e"))
    rep.begin(make_info(), BenchOptions())
    rep.row(make_row(size=8))
    rep.row(make_row(size=16))
    # kill -9 now: the file holds what was flushed
    killed = recover_json(path.read_text())
    assert [r["size"] for r in killed["results"]] == [8, 16]
    assert "end_time" not in killed
    # an error mid-run: close() finalises without end()
    rep.close()
    rep.close()
    doc = json.loads(path.read_text())
    assert [r["size"] for r in doc["results"]] == [8, 16]
    assert "end_time" not in doc and "out_of_bounds" not in doc
    assert doc["ncclbench"]["completed"] is False


def test_close_before_begin_still_valid_json(tmp_path):
    rep = JsonReporter(str(tmp_path / "early.json"), BenchOptions(argv=["a"]), env=[], clock=Clock("s", "e"))
    rep.close()
    doc = json.loads((tmp_path / "early.json").read_text())
    assert list(doc) == ["version", "start_time", "args", "env", "end_time", "ncclbench"]


def test_recover_json_at_every_cut_point():
    """Cut the real file anywhere inside the results: complete rows survive, partial ones go."""
    text = read_fixture("all_reduce_4proc_per_iter.json")
    starts = [m.start() for m in re.finditer(r'\{"size":', text)]
    ends = [m.end() for m in re.finditer(r'"experiment_name":""\}', text)]
    for cut in range(starts[0] - 5, len(text), 97):
        doc = recover_json(text[:cut])
        complete = sum(1 for e in ends if e <= cut)
        assert len(doc.get("results", [])) == complete, cut
        assert doc["version"] == 3
    assert recover_json(text) == json.loads(text)


def test_recover_json_reads_bare_inf_and_rejects_garbage():
    doc = recover_json('{"version":3,"results":[{"size":0,"out_of_place":{"alg_bw":inf,"bus_bw":-inf},"actual_iterations":1}')
    assert doc["results"][0]["out_of_place"]["alg_bw"] == float("inf")
    assert doc["results"][0]["out_of_place"]["bus_bw"] == float("-inf")
    with pytest.raises(ValueError):
        recover_json("no json here")
    with pytest.raises(ValueError):
        recover_json("")

"""nccl-tests' text output, character for character (docs/behaviour.md §5).

Golden tests: every real nccl-tests log in tests/fixtures is parsed into the
result model and rendered again; the text must come back identical.
"""

import io
import json
import sys
from pathlib import Path

import pytest

from ncclbench.core.config import BenchOptions
from ncclbench.core.errors import BenchError
from ncclbench.core.results import DeviceInfo, PerIterStats, ResultRow, RunSummary
from ncclbench.output import MultiReporter, Reporter, open_output_reporters
from ncclbench.output.jsonout import JsonReporter
from ncclbench.output.parse import parse_row, parse_text
from ncclbench.output.text import (
    TextReporter,
    column_header_lines,
    device_lines,
    render_run,
    row_line,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from output_helpers import (  # noqa: E402
    DEFAULT_HEADER,
    FIXTURE_CUTS,
    TEXT_FIXTURES,
    half,
    make_info,
    make_row,
    read_fixture,
    run_from_json_fixture,
)

# ---------------------------------------------------------------- golden


def test_fixtures_present():
    assert len(TEXT_FIXTURES) >= 10, "tests/fixtures/nccl_tests_output is missing"


@pytest.mark.parametrize("name", TEXT_FIXTURES)
def test_golden_rerender(name):
    """Parse a real log, rebuild RunInfo/rows/summary, render: identical text."""
    text = read_fixture(name)
    parsed, rows = parse_text(text)
    assert rows, "no rows parsed"
    assert parsed.other_lines == []
    out = render_run(
        parsed.to_run_info(), parsed.to_options(), rows, parsed.to_summary(), json_path=parsed.json_path
    )
    assert out == text + FIXTURE_CUTS.get(name, "")


def test_golden_covers_the_interesting_shapes():
    seen = {name: parse_text(read_fixture(name)) for name in TEXT_FIXTURES}
    # zero-size rows (all_gather 4 ranks, -b 8)
    assert seen["all_gather_1proc_4gpu.txt"][1][0].size == 0
    # unchecked in-place halves print N/A, one column narrower
    alltoall_rows = seen["alltoall_1proc_4gpu.txt"][1]
    assert all(r.in_place.wrong is None and r.out_of_place.wrong == 0 for r in alltoall_rows)
    # -c 0: both halves N/A
    nocheck = seen["all_reduce_4proc_nocheck.txt"]
    assert nocheck[0].validation == 0
    assert all(r.out_of_place.wrong is None and r.in_place.wrong is None for r in nocheck[1])
    # -I columns and the JSON announcement
    per_iter = seen["all_reduce_4proc_per_iter.txt"]
    assert per_iter[0].per_iter_timing and per_iter[0].json_path == "all_reduce_4proc_per_iter.json"
    assert per_iter[1][0].out_of_place.per_iter.max_us == 21.92
    # 4 processes of one device each vs 1 process of 4 devices
    assert {d.process for d in seen["all_reduce_4proc_8B-8G.txt"][0].devices} == {0, 1, 2, 3}
    assert {d.process for d in seen["all_reduce_1proc_4gpu.txt"][0].devices} == {0}
    # broadcast prints root 0 and op none
    assert seen["broadcast_1proc_4gpu.txt"][1][0].root == 0
    assert seen["broadcast_1proc_4gpu.txt"][1][0].redop == "none"


def test_per_iter_text_from_json_values_matches_real_text():
    """The rows of the real -I JSON, rendered as text, give the real -I text lines."""
    _, info, opts, rows, summary = run_from_json_fixture()
    out = render_run(info, opts, rows, summary, json_path="all_reduce_4proc_per_iter.json")
    fixture = read_fixture("all_reduce_4proc_per_iter.txt")
    assert out.startswith(fixture)
    assert out[len(fixture):].splitlines() == [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 46.0982 ",
        "#",
        "# Collective test concluded: all_reduce_perf",
        "#",
        "",
    ]
    # the footer average is the mean busbw over every printed half (§3.8)
    halves = [h.busbw for r in rows for h in (r.out_of_place, r.in_place)]
    assert abs(sum(halves) / len(halves) - summary.avg_busbw) < 1e-5


# ---------------------------------------------------------------- header variants


def test_default_header_exact():
    assert column_header_lines(BenchOptions()) == DEFAULT_HEADER


def test_cputime_header():
    lines = column_header_lines(BenchOptions(report_cputime=True))
    assert lines[2] == DEFAULT_HEADER[2].replace("     time", "  cputime")
    assert lines[2].count("cputime") == 2
    assert lines[3] == DEFAULT_HEADER[3]


def test_timestamp_header():
    lines = column_header_lines(BenchOptions(report_timestamps=True))
    assert lines[1] == DEFAULT_HEADER[1]
    assert lines[2] == DEFAULT_HEADER[2] + " " * 10 + "timestamp"
    assert lines[3] == DEFAULT_HEADER[3] + "  %Y-%m-%d %H:%M:%S"


def test_per_iter_header_with_timestamps():
    plain = column_header_lines(BenchOptions(per_iter_timing=True))
    real = read_fixture("all_reduce_4proc_per_iter.txt").splitlines()
    start = real.index(plain[1])
    assert real[start - 1 : start + 3] == plain
    both = column_header_lines(BenchOptions(per_iter_timing=True, report_timestamps=True))
    assert both[2] == plain[2] + " " * 10 + "timestamp"
    assert both[3] == plain[3] + "  %Y-%m-%d %H:%M:%S"


# ---------------------------------------------------------------- rows


def test_row_na_is_one_character_narrower():
    checked = row_line(make_row(), BenchOptions())
    unchecked = row_line(make_row(ip=half(19.93, wrong=None)), BenchOptions())
    assert checked.endswith("       0")
    assert unchecked.endswith("    N/A")
    assert len(checked) - len(unchecked) == 1


def test_row_large_wrong_count_uses_6g():
    line = row_line(make_row(oop=half(wrong=1234567)), BenchOptions())
    assert "  1.23457e+06  " in line


def test_row_timestamp_and_cputime():
    row = make_row(oop=half(35286.7, 243.43, 365.15, cpu=5.5), timestamp="2026-11-21 07:48:14")
    opts = BenchOptions(report_timestamps=True, report_cputime=True)
    line = row_line(row, opts)
    assert line.endswith("       0  2026-11-21 07:48:14")
    assert line.startswith("           8             2     float     sum      -1     5.50  243.43  365.15")


def test_row_root_and_empty_op():
    row = ResultRow(1024, 128, "int8", "", 3, half(), half())
    assert row_line(row, BenchOptions()).startswith("        1024           128      int8               3  ")


def test_per_iter_row_columns():
    stats = PerIterStats(2, 10.08, 21.92, 11.0, 10.75, 11.97, 21.92, 1.59, 14.487, [])
    row = make_row(oop=half(10.88, per_iter=stats), ip=half(10.74, per_iter=stats))
    line = row_line(row, BenchOptions(per_iter_timing=True))
    assert line.endswith("       0    10.08    21.92    21.92    14.49")
    assert line.count("    10.08    21.92    21.92    14.49") == 2


# ---------------------------------------------------------------- banner & footer


def test_banner_variants():
    opts = BenchOptions(
        step_factor=1, step_bytes=1048576, blocking=3, per_iter_timing=True, per_iter_skip=2, parallel_init=True
    )
    out = render_run(make_info(), opts, [], None).splitlines()
    assert out[2] == (
        "# nThread 1 nGpus 1 minBytes 33554432 maxBytes 33554432 step: 1048576(bytes) warmup iters: 1 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0 unalign: 0"
    )
    assert out[3] == "# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier "
    assert out[4] == "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows; summary skips first 2 iterations "
    assert out[5] == "# Parallel Init Enabled: threads call into NcclInitRank concurrently "
    assert out[6:8] == ["#", "# Using devices"]
    for mode, text in ((1, "(-m) "), (2, "no barrier "), (4, None)):
        lines = render_run(make_info(), BenchOptions(blocking=mode), [], None).splitlines()
        blocking = [l for l in lines if l.startswith("# Blocking")]
        assert (blocking[0].endswith(text) if text else blocking == [])


def test_mpi_backend_version_line_and_parse_back():
    info = make_info(backend="mpi", nccl_version_code=None, nccl_headers_code=None, library="MPICH 4.2.0",
                     devices=[DeviceInfo(0, 0, 77, "node1", -1, "cpu", "CPU (MPI)", 0)])
    out = render_run(info, BenchOptions(), [make_row()], RunSummary(0, 0.0, None, None))
    first = out.splitlines()[0]
    assert first == "# ncclbench 0.1.0 backend=mpi library=MPICH 4.2.0"
    assert "#  Rank  0 Group  0 Pid     77 on      node1 device -1 [cpu] CPU (MPI)" in out
    parsed, rows = parse_text(out)
    assert (parsed.backend, parsed.library, parsed.nccl_version_code) == ("mpi", "MPICH 4.2.0", None)
    assert render_run(parsed.to_run_info(), parsed.to_options(), rows, parsed.to_summary()) == out


def test_reducing_max_bytes_and_notes_before_header():
    info = make_info(notes=["ncclbench: backend nccl via libnccl.so.2"], reduced_max_bytes=1 << 30)
    lines = render_run(info, BenchOptions(), [], None).splitlines()
    dev = lines.index("#  Rank  0 Group  0 Pid   1631 on         vm device  0 [0000:00:06] NVIDIA H200")
    assert lines[dev + 1 : dev + 4] == [
        "#",
        "# Reducing maxBytes to 1073741824 due to memory limitation",
        "# ncclbench: backend nccl via libnccl.so.2",
    ]
    assert lines[dev + 4 :] == DEFAULT_HEADER
    parsed, _ = parse_text("\n".join(lines))
    assert parsed.reduced_max_bytes == 1 << 30
    assert parsed.notes == ["# ncclbench: backend nccl via libnccl.so.2"]


def test_device_block_capped_like_nccl_tests():
    devs = [DeviceInfo(r, 0, 5, "h" * 30, r, "0000:00:06", "X" * 100, 0) for r in range(20)]
    lines = device_lines(devs)
    text = "".join(l + "\n" for l in lines)
    assert len(text) == 2047 and text.endswith("...\n")
    other = device_lines(devs[:1] + [DeviceInfo(1, 0, 6, "b", 1, "0000:00:07", "Y", 1)])
    assert len(other) == 2


def test_footer_gate_memory_error():
    base = dict(out_of_bounds=0, avg_busbw=126.2)
    ok = RunSummary(**base, min_bw_gate=100.0, gate_ok=None)
    failed = RunSummary(**base, min_bw_gate=200.0, gate_ok=None, errors=["unhandled cuda error"],
                        memory_line="# GPU memory usage     : Initialization 586 MB | User-Allocated 6.00 MB | Collective 0.00 B | Total  592 MB")
    out_ok = render_run(make_info(), BenchOptions(), [], ok).splitlines()
    assert out_ok[-6:] == [
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : 126.2 OK",
        "#",
        "# Collective test concluded: all_reduce_perf",
        "#",
        "",
    ]
    out_bad = render_run(make_info(), BenchOptions(), [], failed).splitlines()
    assert out_bad[-6:] == [
        "# Avg bus bandwidth    : 126.2 FAILED",
        "#",
        "# Collective test concluded: all_reduce_perf",
        failed.memory_line,
        "#",
        "# error: unhandled cuda error",
    ]
    oob = render_run(make_info(), BenchOptions(), [], RunSummary(3, 1.5, None, None)).splitlines()
    assert oob[-6] == "# Out of bounds values : 3 FAILED"
    # the parser reads the footer back
    parsed, _ = parse_text("\n".join(out_bad))
    assert (parsed.gate, parsed.memory_line, parsed.errors) == ("FAILED", failed.memory_line, ["unhandled cuda error"])


def test_round_trip_with_all_options():
    stats = PerIterStats(0, 1.5, 3.25, 2.0, 2.0, 3.0, 3.25, 0.5, 25.0, [])
    opts = BenchOptions(per_iter_timing=True, report_cputime=True, report_timestamps=True)
    rows = [
        make_row(oop=half(1.5, 0.01, 0.02, per_iter=stats, cpu=1.25), ip=half(2.5, wrong=None, per_iter=stats),
                 timestamp="2026-01-02 03:04:05"),
        make_row(size=1 << 33, count=1 << 31, oop=half(35286.7, 243.43, 365.15, per_iter=stats),
                 ip=half(12345678.9, per_iter=stats), timestamp="2026-01-02 03:04:06"),
    ]
    out = render_run(make_info(), opts, rows, RunSummary(0, 12.5, None, None))
    parsed, back = parse_text(out)
    assert (parsed.per_iter_timing, parsed.report_cputime, parsed.report_timestamps) == (True, True, True)
    assert [r.timestamp for r in back] == ["2026-01-02 03:04:05", "2026-01-02 03:04:06"]
    assert back[0].out_of_place.time_us == 1.25  # under -C the printed time is the cputime
    assert render_run(parsed.to_run_info(), parsed.to_options(), back, parsed.to_summary()) == out


def test_parse_row_rejects_other_lines():
    assert parse_row("# Out of bounds values : 0 OK") is None
    assert parse_row("vm:1631:1631 [0] NCCL INFO Bootstrap: Using eth0") is None
    assert parse_row("nRanks 3 is not a power of 2, skipping") is None


# ---------------------------------------------------------------- reporter behaviour


class RecordingStream(io.StringIO):
    def __init__(self):
        super().__init__()
        self.flushed = []

    def flush(self):
        self.flushed.append(self.getvalue())


def test_text_reporter_streams_each_row():
    stream = RecordingStream()
    rep = TextReporter(stream, BenchOptions(), json_path="out.json")
    assert isinstance(rep, Reporter)
    rep.begin(make_info(), BenchOptions())
    assert stream.getvalue().startswith("# Writing JSON output to out.json\n# nccl-tests version 2.19.6 ")
    rep.row(make_row())
    assert stream.flushed[-1].endswith("      -1    18.55    0.00    0.00       0    19.93    0.00    0.00       0\n")
    rep.message("nRanks 3 is not a power of 2, skipping")
    assert stream.getvalue().endswith("skipping\n")
    rep.close()
    rep.close()
    rep.row(make_row())  # after close: ignored, no error
    assert stream.getvalue().count("    19.93") == 1


class Exploding:
    def __init__(self):
        self.closed = 0

    def begin(self, info, opts):
        pass

    def message(self, line):
        pass

    def row(self, row):
        pass

    def end(self, summary):
        pass

    def close(self):
        self.closed += 1
        raise BenchError("disk full")


def test_multi_reporter_closes_all_and_reraises():
    stream = io.StringIO()
    bad = Exploding()
    text = TextReporter(stream, BenchOptions())
    multi = MultiReporter([bad, text])
    multi.begin(make_info(), BenchOptions())
    multi.row(make_row())
    with pytest.raises(BenchError, match="disk full"):
        multi.close()
    assert bad.closed == 1 and text._closed


def test_open_reporters_json_only_for_json_suffix(tmp_path):
    stream = io.StringIO()
    opts = BenchOptions(output_file=str(tmp_path / "run.txt"))
    multi = open_output_reporters(opts, stream)
    assert [type(r) for r in multi.reporters] == [TextReporter]
    assert list(tmp_path.iterdir()) == []
    opts = BenchOptions(output_file=str(tmp_path / "run.JSON"), argv=["all_reduce_perf"])
    multi = open_output_reporters(opts, stream, env={})
    jrep = multi.reporters[1]
    assert isinstance(jrep, JsonReporter) and jrep.path == str(tmp_path / "run.JSON")
    multi.begin(make_info(), opts)
    multi.close()
    assert stream.getvalue().startswith("# Writing JSON output to %s\n" % jrep.path)
    assert json.loads((tmp_path / "run.JSON").read_text())["version"] == 3


def test_parse_row_empty_op_with_integer_looking_time():
    """hypercube prints an empty op; a 7-digit time must not be taken for the root."""
    row = ResultRow(1 << 30, 1 << 28, "float", "", -1, half(1234567.0, 1.5, 1.5), half(2345678.0, 1.5, 1.5))
    line = row_line(row, BenchOptions())
    assert "     float              -1  1234567" in line
    back = parse_row(line, per_iter=False)
    assert (back.redop, back.root, back.out_of_place.time_us, back.in_place.time_us) == ("", -1, 1234567.0, 2345678.0)
    assert row_line(back, BenchOptions()) == line

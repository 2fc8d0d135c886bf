"""The one text-log parser (output.parse) on what both of its users feed it:
concatenated logs, older banners, damaged lines; and the one -J recovery routine."""

import json
import math
import sys
from pathlib import Path

from ncclbench.output.jsonout import recover_json, repair_json
from ncclbench.output.parse import collective_of, parse_row, parse_tests, parse_text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from output_helpers import read_fixture  # noqa: E402

ROW = "     1048576        262144     float     sum      -1    19.58   53.56   80.34       0    19.40   54.05   81.07       0"


def test_concatenated_log_splits_per_test_and_parse_text_reads_the_first():
    names = ["all_reduce_1proc_4gpu.txt", "broadcast_1proc_4gpu.txt", "all_reduce_4proc_per_iter.txt"]
    text = "shell$ ./run_all.sh\n" + "".join(read_fixture(n) for n in names)
    tests = parse_tests(text)
    assert [p.program for p, _ in tests] == ["all_reduce_perf", "broadcast_perf", "all_reduce_perf"]
    for (parsed, rows), name in zip(tests, names):
        alone, alone_rows = parse_text(read_fixture(name))
        assert rows == alone_rows and parsed.devices == alone.devices
        assert (parsed.to_summary() is None) == ("# Avg bus bandwidth" not in read_fixture(name))
    # each test keeps its own lines; the line before the first test goes with it
    assert tests[0][0].lines[0] == "shell$ ./run_all.sh"
    assert tests[1][0].lines == read_fixture(names[1]).splitlines()
    first, first_rows = parse_text(text)
    assert first.program == "all_reduce_perf" and first_rows == tests[0][1]


def test_older_banner_and_device_lines_without_group():
    text = (
        "# nccl-tests version 2.10.0\n"
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n"
        "#\n# Using devices\n"
        "#   Rank  0 Pid  11 on node1 device  0 [0x07] NVIDIA A100-SXM4-80GB\n"
        "#   Rank  1 Pid  11 on node1 device  1 [0x0b] NVIDIA A100-SXM4-80GB\n"
        "#\n#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong\n"
        + ROW + "\n"
    )
    parsed, rows = parse_text(text)
    assert parsed.nccl_tests_version == "2.10.0" and parsed.nccl_version_code is None
    assert (parsed.ngpus, parsed.warmup_iters, parsed.iters, parsed.validation) == (2, 5, 20, 1)
    assert parsed.agg_iters is None and parsed.graph is None
    assert [(d.rank, d.group, d.process) for d in parsed.devices] == [(0, 0, 0), (1, 0, 0)]
    info = parsed.to_run_info()
    assert (info.nranks, info.world_size) == (2, 1)
    assert len(rows) == 1 and rows[0].in_place.busbw == 81.07


def test_damaged_lines_are_skipped_not_raised():
    text = read_fixture("all_reduce_1proc_4gpu.txt")
    text = text.replace("# Avg bus bandwidth    : ", "# Avg bus bandwidth    : 1.2.3x")
    parsed, rows = parse_text(text)
    assert math.isnan(parsed.to_summary().avg_busbw) and len(rows) == 31
    huge = ROW[:-8] + "  99999999999999999999999"
    assert parse_row(ROW) is not None and parse_row(huge) is None
    assert parse_row("99999999999999999999" + ROW[12:]) is None  # size beyond int64
    assert parse_row(ROW.replace("   19.58", "     inf")).out_of_place.time_us == math.inf
    parsed, rows = parse_text("")
    assert rows == [] and parsed.program is None


def test_cpu_time_only_under_cputime():
    assert math.isnan(parse_row(ROW).out_of_place.cpu_time_us)
    assert parse_row(ROW, cputime=True).out_of_place.cpu_time_us == 19.58


def test_collective_of():
    assert collective_of("all_reduce_perf") == "all_reduce"
    assert collective_of("/opt/nccl-tests/build/alltoallv_perf_mpi") == "alltoallv"
    assert collective_of("my_tool") == "my_tool"


def test_repair_json_drops_a_record_cut_short_and_keeps_scalars():
    fixed, cut = repair_json('{"version":3,"results":[{"size":8,"x":1},{"size":16,"out_of_place":{"time":1')
    assert cut and json.loads(fixed) == {"version": 3, "results": [{"size": 8, "x": 1}]}
    fixed, cut = repair_json('{"version":3,"config":{"devices":[{"rank":0},{"ra')
    assert cut and json.loads(fixed)["config"]["devices"] == [{"rank": 0}]
    fixed, cut = repair_json('{"a":[[1,2],[3')  # a number at the cut may be cut short: dropped
    assert cut and json.loads(fixed) == {"a": [[1, 2], []]}
    doc = recover_json('{"version":3,"results":[{"size":8,"actual_iterations":20},{"size":16,"actual_iterations":20')
    assert [r["size"] for r in doc["results"]] == [8]

"""NCCL_TESTS_MIN_BW: one verdict, decided once in RunSummary, read by the text and the JSON alike."""

import json
import math

import pytest

from ncclbench.core.results import MIN_BW_FACTOR, RunSummary, min_bw_verdict
from ncclbench.output.jsonout import summary_json
from ncclbench.output.text import footer_lines


@pytest.mark.parametrize(
    ("avg", "gate", "ok"),
    [
        (90.0, 100.0, True),  # exactly 0.9 x the gate passes (nccl-tests: fail only when below)
        (89.99, 100.0, False),
        (150.0, 100.0, True),
        (math.nan, 100.0, True),  # a NaN average is not below anything, as in common.cu
        (0.0, 0.0, True),
        (5.0, None, None),
    ],
)
def test_verdict_matches_nccl_tests_comparison(avg, gate, ok):
    assert min_bw_verdict(avg, gate) is ok
    assert MIN_BW_FACTOR == 0.9


@pytest.mark.parametrize(("avg", "gate"), [(89.99, 100.0), (90.0, 100.0), (math.nan, 100.0), (10.0, None)])
def test_text_and_json_read_the_same_verdict(avg, gate):
    summary = RunSummary(out_of_bounds=0, avg_busbw=avg, min_bw_gate=gate, gate_ok=None)
    text = next(line for line in footer_lines(summary, "all_reduce_perf") if "Avg bus bandwidth" in line)
    okay = json.loads("{%s}" % summary_json(summary))["average_bus_bandwidth"]["okay"]  # nccl-tests: "true"/"false"
    if summary.gate_ok is None:
        assert okay == "unchecked" and not text.rstrip().endswith(("OK", "FAILED"))
    else:
        assert okay == ("true" if summary.gate_ok else "false")
        assert text.rstrip().endswith("OK" if summary.gate_ok else "FAILED")

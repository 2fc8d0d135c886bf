"""The report draws explain's expected curve (a healthy system's busbw at each of the run's sizes)
dashed beside the measured line, in the run's colour, in both renderers."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ncclbench.commands.report import judged_runs
from ncclbench.report import plots
from ncclbench.store.importers import load_file

FIX = Path(__file__).parent / "fixtures" / "nccl_tests_output"
NS = "{http://www.w3.org/2000/svg}"


def _run():
    return load_file(FIX / "all_reduce_4proc_8B-8G.txt")[0]


def test_judged_runs_carry_the_curve_of_the_runs_sizes():
    run = _run()
    j = judged_runs([run])[run.label]
    assert j.expected_text == "expected (healthy 4x H200 all_reduce)"
    sizes = [s for s, _ in j.expected]
    assert sizes == sorted(sizes) and sizes[0] == 1 << 20 and sizes[-1] == max(r.size for r in run.rows)
    assert all(b > 0 for _, b in j.expected)


def test_the_busbw_plot_draws_the_expected_curve_dashed_in_the_runs_colour():
    run = _run()
    j = judged_runs([run])[run.label]
    specs = {s.name: s for s in plots.build_specs([run], expected={run.label: (j.expected, j.expected_text)})}
    measured, curve = specs["busbw"].lines
    assert curve.dashed and not measured.dashed and curve.color == measured.color
    assert curve.label == f"{run.label} expected (healthy 4x H200 all_reduce)"
    assert list(zip(curve.x, curve.y)) == list(j.expected)
    assert all(not ln.dashed for ln in specs["time"].lines)  # the time plot has no expectation
    root = ET.fromstring(plots.svg_plot(specs["busbw"]))
    dashed = [p for p in root.findall(f"{NS}polyline") if p.get("stroke-dasharray")]
    assert len(dashed) == 1 and len(dashed[0].get("points", "").split()) == len(curve.x)


def test_no_curve_no_dashed_line():
    run = _run()
    specs = {s.name: s for s in plots.build_specs([run], expected={run.label: ((), "expected")})}
    assert [ln.dashed for ln in specs["busbw"].lines] == [False]

"""bench/gate_trials.py's control flow on a CPU machine: the calibration chooses an injection only
where one landed within its tolerance (a latency injection only where the plateau stayed put), a
case whose injection did not land is reported as such with what the candidates measured (never
"caught 0 of 20"), the budget stops the collection and lists what was not run, and the report
carries the provenance (commit, command, machine) the results need."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import gate_trials as gt  # noqa: E402  (bench/)


def _m(setting: str, change: float | None, other: float | None = 0.0) -> dict:
    return {"setting": setting, "run": 1, "change_pct": change, "other_pct": other}


def test_choose_takes_the_nearest_candidate_within_tolerance_or_none():
    measured = {"plateau busbw": [_m("a", 4.0), _m("b", 8.0), _m("c", 11.5), _m("d", 70.0)],
                "latency": [_m("x", 29.0, other=9.0), _m("y", 36.0, other=1.0), _m("z", 80.0)]}
    chosen = gt.choose(measured)
    assert chosen["drop10"] == "c"  # 11.5 is nearer 10 than 8.0
    assert chosen["drop5"] == "a"
    assert chosen["drop50"] is None  # 70 % is beyond 50 +/- 15: did not land
    assert chosen["lat30"] == "y"  # x is nearer 30 but took 9 % of the plateau too
    assert gt.choose({})["drop10"] is None


def _doc(chosen: dict, trials: list[dict]) -> dict:
    return {"calibration": {"chosen": chosen, "measured": {"plateau busbw": [_m("tbf 0.9 x rate", 0.4)],
                                                           "latency": [_m("CPU hog duty 0.2", 3.0)]}},
            "trials": trials}


def test_a_case_whose_injection_did_not_land_says_so():
    doc = _doc({"drop10": None}, [])
    row = gt.case_row(doc, "10 % drop, 3-run baseline", "caught", "drop10")
    assert "injection did not land (10 +/- 3 % wanted; tbf 0.9 x rate: 0.4%)" in row and "0 of" not in row


def test_caught_counts_the_injected_figure_and_reports_the_injected_change():
    trials = [{"case": "+30 % latency, 5-run baseline", "exit_code": 7, "figure_failed": f, "injected_pct": p,
               "figures": []} for f, p in ((True, 31.0), (False, 24.0), (True, 35.0))]
    row = gt.case_row(_doc({"lat30": "CPU hog duty 0.2"}, trials), "+30 % latency, 5-run baseline", "caught", "lat30")
    # exit 7 three times, but once only for another figure: caught 2 of 3
    assert "caught: 2 of 3" in row and "CPU hog duty 0.2" in row and "31.0 (24.0 .. 35.0)" in row


def test_identical_runs_count_exit_7_and_9_apart():
    trials = [{"case": "identical, 1-run baseline", "exit_code": c, "figures": []} for c in (0, 7, 9, 9)]
    row = gt.case_row(_doc({}, trials), "identical, 1-run baseline", "false alarm", "good")
    assert row.endswith("| 1 | 1 | 2 |") and "false alarm: 3 of 4" in row


def test_clock_refuses_a_step_the_time_left_cannot_cover():
    clock = gt.Clock(10.0)
    assert clock.allows("first")  # no pace measured yet
    clock.walls += [4.0, 4.0]
    assert clock.allows("one more run", 1) and not clock.allows("a round of 5", 5)
    assert clock.skipped == ["a round of 5"]


def _dry(tmp_path: Path, budget: float, trials: int = 2) -> tuple[subprocess.CompletedProcess, dict, str]:
    out = tmp_path / "out"
    env = {**os.environ, "NCCLBENCH_COMMIT": "feedbee", "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "gate_trials.py"), "dry", "--trials", str(trials),
                        "--budget-s", str(budget), "--out", str(out)], capture_output=True, text=True, env=env,
                       timeout=240, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    return p, json.loads((out / "gate-trials.json").read_text()), (out / "gate-trials.md").read_text()


@pytest.mark.skipif(sys.platform != "linux", reason="the CPU backend's runs")
def test_dry_collection_stops_at_its_budget_and_records_provenance(tmp_path):
    _, doc, md = _dry(tmp_path, budget=2.5)
    m = doc["meta"]
    assert m["commit"] == "feedbee" and "gate_trials.py dry" in m["command"] and m["budget_s"] == 2.5
    assert m["not_run"] and any(x.startswith("round") or x.startswith("seed") for x in m["not_run"])
    assert "Not run (budget spent):" in md and "Commit feedbee" in md
    assert m["nruns"] < 5 + 2  # the budget cut the seeds or the calibration short


class _Refusing:
    """A setup whose every run fails (a setting the library refuses)."""

    def candidates(self, figure: str) -> list:
        return [gt.Setting(f"{figure} knob", {"X": "1"})]

    def run(self, s, db, log) -> dict:
        raise gt.RunFailed("rc 3: ncclInvalidUsage")


def test_a_failing_candidate_is_reported_and_does_not_end_the_collection(tmp_path):
    cal = gt.calibrate(_Refusing(), tmp_path / "r.sqlite", None, [], gt.Clock(60.0))
    tried = [m["setting"] for ms in cal["measured"].values() for m in ms]
    assert tried == ["plateau busbw knob (run failed: rc 3: ncclInvalidUsage)",
                     "latency knob (run failed: rc 3: ncclInvalidUsage)"]
    assert set(cal["chosen"].values()) == {None}  # nothing landed: every injected case says so


def test_the_latency_case_asks_for_half_the_rise_it_injects():
    """Asking `--max-rise 30` of a 30 % injection makes "caught" a coin toss by construction (an injection
    measured at 30 % is beyond a 30 % limit about half the time): the case asks for half."""
    lat = next(t for t in gt.TARGETS if t.kind == "lat30")
    assert gt.LATENCY_ASKED <= lat.want / 2
    assert [c[0] for c in gt.cases_of("latency")] == [gt.LATENCY_CONTROL, "+30 % latency, 5-run baseline"]
    assert gt.cases_of(None) is gt.CASES


def test_gate_rounds_are_fitted_to_the_budget():
    # a pilot of 10 rounds: 9 s a run, 4 s of it rounds; 49 runs in 230 s leave 3.9 s a run
    assert gt.fit_rounds(9.0, 4.0, 10, 230.0, 49) == 3
    assert gt.fit_rounds(3.0, 1.0, 10, 600.0, 49) == 10  # room for the default: no more than it
    # 45 runs in 240 s: 4.44 s a run after the 20 % margin
    assert gt.fit_rounds(5.0, 4.0, 10, 240.0, 45) == 8  # 1 s besides rounds of 0.4 s
    assert gt.fit_rounds(5.0, 2.0, 10, 240.0, 45) == 7  # 3 s besides rounds of 0.2 s
    assert gt.fit_rounds(8.0, 2.0, 10, 240.0, 45) == 3  # never fewer than 3 (a spread needs them)
    assert gt.runs_needed(20, "latency") == gt.SEEDS + 4 + 40


def test_a_trial_line_says_the_injection_the_figure_and_the_verdict():
    t = {"case": "+30 % latency, 5-run baseline", "round": 3, "run": 57, "baseline": [40, 42, 44, 46, 48],
         "injected_pct": 31.24, "exit_code": 7, "status": "regression",
         "figures": [{"figure": "latency", "worse_pct": 29.8, "limit_pct": 17.1, "detectable_pct": 17.1,
                      "verdict": "regression"}]}
    line = gt.trial_line(t, "latency")
    assert line == ("trial  3 +30 % latency, 5-run baseline: run 57 vs 40, 42, 44, 46, 48: injected +31.2 % "
                    "(measured); latency +29.8 % worse, limit 17.1 %, can see 17.1 %, regression; exit 7 (regression)")


@pytest.mark.skipif(sys.platform != "linux", reason="the CPU backend's runs")
def test_dry_latency_only_collection_runs_gated_and_reports_where_the_noise_sits(tmp_path):
    """--only latency: a pilot fits the gate rounds to the budget, every run is gated, each trial prints
    a line, the report has the latency case and its control only, the latency noise by where it sits
    (table, rounds, gated figure) and a summary line per case."""
    out = tmp_path / "out"
    env = {**os.environ, "NCCLBENCH_COMMIT": "feedbee", "PYTHONPATH": str(ROOT / "src"), "NCCLBENCH_EXPLAIN": "0"}
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "gate_trials.py"), "dry", "--only", "latency",
                        "--trials", "1", "--budget-s", "200", "--out", str(out)], capture_output=True, text=True,
                       env=env, timeout=400, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads((out / "gate-trials.json").read_text())
    md = (out / "gate-trials.md").read_text()
    assert doc["meta"]["only"] == "latency" and "--gate-rounds" in doc["meta"]["run_command"]
    assert doc["calibration"]["gate_rounds"]["how"].startswith("fitted to the budget: a pilot run")
    assert list(doc["calibration"]["measured"]) == ["latency"]
    assert f"| {gt.LATENCY_CONTROL} |" in md and "10 % drop" not in md and "injection did not land" in md
    assert "Latency noise over the" in md and "the part the rounds do not renew is" in md
    assert "trial  1 identical, 5-run baseline, --max-rise 15: run" in p.stdout
    assert f"summary: {gt.LATENCY_CONTROL}: false alarm" in p.stdout
    assert all(f["measured"].startswith("gate rounds") for t in doc["trials"] for f in t["figures"]
               if f["figure"] == "latency")

"""A run's options travel from the command line to the timed loop without coming back to a
module they left (issue 33: "the run path goes back and forth"), recorded by
bench/run_path_frames.py on the CPU backend: the stack at the timed loop's entry, for the
benchmark (explain and the store on, then off) and for tune.  And `run_here` asks nothing
about the features that follow a run: they are observers (`benchmark.observers`)."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from launch_helpers import PY, ROOT, child_env

from ncclbench.launch.spawn import find_mpiexec

SCRIPT = ROOT / "bench" / "run_path_frames.py"
BENCH_PATH = ["commands", "commands._benchmark", "benchmark.orchestrate", "run.plan_runner", "run.timing"]
TUNE_PATH = ["commands", "commands.tune", "tune.job", "tune.candidate_runner", "run.timing"]


def _paths(what: str) -> list[dict]:
    p = subprocess.run([PY, str(SCRIPT), what], env=child_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    return [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]


def _short(modules: list[str]) -> list[str]:
    return [m.removeprefix("ncclbench.") for m in modules]


def test_the_benchmarks_options_go_straight_down_to_the_timed_loop() -> None:
    found = _paths("bench")
    assert len(found) == 2  # with explain and the store, and without
    for path in found:
        assert path["exit"] == 0
        assert _short(path["modules"]) == BENCH_PATH and path["returns"] == []
        assert path["frames"] <= 10, path


@pytest.mark.skipif(find_mpiexec() is None or importlib.util.find_spec("mpi4py") is None,
                    reason="tune needs two ranks: the [mpi] extra (mpiexec, mpi4py)")
def test_tunes_options_go_straight_down_to_the_timed_loop() -> None:
    (path,) = _paths("tune")
    assert path["exit"] == 0 and _short(path["modules"]) == TUNE_PATH and path["returns"] == []
    assert path["frames"] <= 9, path


def test_run_here_names_no_feature_that_follows_the_run() -> None:
    source = (ROOT / "src" / "ncclbench" / "benchmark" / "orchestrate.py").read_text()
    (run_here,) = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef) and n.name == "run_here"]
    names = {n.id for n in ast.walk(run_here) if isinstance(n, ast.Name)} | \
        {n.attr for n in ast.walk(run_here) if isinstance(n, ast.Attribute)}
    features = {w for n in names for w in ("explain", "store", "baseline", "gate", "reporter") if w in n.lower()}
    assert not features, f"run_here asks about {sorted(features)}: make it an observer (benchmark/observers.py)"
    assert not [n for n in ast.walk(run_here) if isinstance(n, ast.Try)], "how a run ends: run.rank_job.RankJob"


def test_the_recorder_reads_the_layers_as_the_import_graph_does() -> None:
    spec = importlib.util.spec_from_file_location("run_path_frames", SCRIPT)
    assert spec is not None and spec.loader is not None
    frames = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(frames)
    from test_import_graph import LAYERS

    order = [name for name, _ in LAYERS if name != "support"]
    for i, (_, members) in enumerate(x for x in LAYERS if x[0] != "support"):
        for folder in members - {"__init__"}:
            assert frames.layer(f"ncclbench.{folder}.x") == i, (folder, order)
    assert frames.returns(["a", "b", "a", "c", "b"]) == ["a", "b"]
    assert Path(frames.__file__).name == "run_path_frames.py"

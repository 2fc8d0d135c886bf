"""`baseline set NAME RUN --runs N` takes runs of one experiment, whatever files they wrote.

Why: the history used to be matched by the whole argv, so a run with `-J run5.json` (or --csv,
--metrics) started a new history ("only 1 finished run of that command") though it measured the
same thing.  What was measured (collective, sizes, datatypes, ops, ranks, hosts, backend, NCCL
settings) decides; output options do not.
"""
from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

from ncclbench.commands import main as ncclbench_main
from ncclbench.store import ResultStore
from ncclbench.store.importers import load_file

AR = Path(__file__).parent / "fixtures" / "nccl_tests_output" / "all_reduce_1proc_4gpu.txt"
BASE_ARGV = ("all_reduce_perf", "-b", "8", "-e", "128M", "-f", "2")


def _store_runs(db: Path, variants: list[tuple[dict, dict[str, str]]]) -> list[int]:
    """One stored run per (options changes, NCCL env) of the same fixture run, in order."""
    template = load_file(AR)[0]
    ids = []
    with ResultStore(db) as s:
        for changes, env in variants:
            run = copy.deepcopy(template)
            argv = BASE_ARGV + tuple(str(a) for a in changes.pop("extra_argv", ()))
            run.info.argv = argv
            options = dataclasses.replace(template.options, argv=argv, **changes)
            rid = s.begin_run(run.info, options, env=env)
            for i, row in enumerate(run.rows):
                s.add_row(rid, i, row)
            s.finish_run(rid, run.summary)
            ids.append(rid)
    return ids


def _variants() -> list[tuple[dict, dict[str, str]]]:
    return [({}, {}),                                                            # 1
            ({"output_file": "run5.json", "extra_argv": ("-J", "run5.json")}, {}),  # 2: -J
            ({"csv_file": "t.csv", "metrics_file": "m.prom",
              "extra_argv": ("--csv", "t.csv", "--metrics", "m.prom", "--no-progress")}, {}),  # 3
            ({"iters": 50, "extra_argv": ("-n", "50")}, {}),                       # 4: measured otherwise
            ({}, {"NCCL_ALGO": "Ring"}),                                           # 5: other NCCL settings
            ({"datatypes": ("half",), "datatype_arg": "half", "extra_argv": ("-d", "half")}, {}),  # 6
            ({"output_file": "last.json", "extra_argv": ("-J", "last.json")}, {})]  # 7


def test_output_options_do_not_split_the_history(tmp_path: Path) -> None:
    db = tmp_path / "r.sqlite"
    ids = _store_runs(db, _variants())
    with ResultStore(db) as s:
        assert s.runs_of_same_command(ids[-1], 10) == [ids[0], ids[1], ids[2], ids[6]]
        assert s.runs_of_same_command(ids[-1], 2) == [ids[2], ids[6]]  # the newest N
        assert s.runs_of_same_command(ids[3], 10) == [ids[3]]  # -n 50 is another experiment
        assert s.runs_of_same_command(ids[4], 10) == [ids[4]]  # so is NCCL_ALGO=Ring


def test_baseline_set_runs_takes_the_whole_history(tmp_path: Path, capsys) -> None:
    db = tmp_path / "r.sqlite"
    ids = _store_runs(db, _variants())
    assert ncclbench_main(["baseline", "set", "good", str(ids[-1]), "--runs", "4", "--db", str(db)]) == 0
    out = capsys.readouterr()
    assert f"baseline 'good' = run {ids[6]} and its history: runs {ids[0]}, {ids[1]}, {ids[2]}" in out.out
    assert "warning" not in out.err

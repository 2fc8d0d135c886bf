"""tune measures what a plain run would on the same workers: the sizes of the run plan
(`make_plan`: nccl-tests' memory clamp), its datatype/op check and root, and the backend
as the `Backend` enum."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ncclbench.collectives import COLLECTIVES
from ncclbench.core.config import Backend
from ncclbench.core.errors import ArgumentError
from ncclbench.run.plan import make_plan
from ncclbench.tune.candidates import DEFAULT, Candidate, CandidateSet
from ncclbench.tune.job import check_environment, measure_and_report
from ncclbench.tune.options import parse_tune_args

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_helpers import SmallBuffersWorker  # noqa: E402

MiB = 1 << 20


class SameWorker:
    """A switcher whose candidates all run on one worker (what MPICH's cvars do)."""

    def __init__(self, worker):
        self.control = worker

    def worker(self, cand):
        return self.control

    def apply(self, cand):
        pass

    def probe(self, cand, placement):
        return None, None

    def drop(self, cand):
        pass

    def close(self):
        pass


def tune(tmp_path, args: list[str], capacity: int, collective: str = "all_reduce"):
    topts = parse_tune_args(collective, [*args, "-c", "0", "-n", "2", "-w", "0", "--rounds", "2", "--no-store",
                                         "--out", str(tmp_path / "t")])
    worker = SmallBuffersWorker(capacity)
    plan = make_plan(topts.bench, COLLECTIVES[collective], Backend.MPI, worker)
    cset = CandidateSet([DEFAULT, Candidate("other", (("X_ALGO", "other"),))])
    code = measure_and_report(topts, plan, cset, SameWorker(worker), "fake 1.0", None, 1, [], True)
    return code, json.loads((tmp_path / "t.json").read_text()), worker.comm


def test_tune_sweeps_the_clamped_sizes(tmp_path, capsys):
    """-e 64M on buffers of 3 MiB: a plain run measures 1M and 2M; so does tune.  Without the
    clamp the 4 MiB call would reach beyond the buffers (the fake communicator fails it)."""
    code, doc, comm = tune(tmp_path, ["-b", "1M", "-e", "64M", "-f", "2"], 3 * MiB)
    assert code == 0
    assert sorted(int(s) for s in doc["times_us"]) == [1 * MiB, 2 * MiB]
    assert max(comm.calls) * 4 == 2 * MiB
    assert doc["reduced_max_bytes"] == 3 * MiB
    assert any(n.startswith(f"Reducing maxBytes to {3 * MiB} due to memory limitation") for n in doc["notes"])


def test_tune_without_the_clamp_keeps_the_requested_range(tmp_path, capsys):
    code, doc, _ = tune(tmp_path, ["-b", "1M", "-e", "4M", "-f", "2"], 64 * MiB)
    assert code == 0 and sorted(int(s) for s in doc["times_us"]) == [1 * MiB, 2 * MiB, 4 * MiB]
    assert doc["reduced_max_bytes"] is None and not any("Reducing" in n for n in doc["notes"])


def test_environment_check_follows_the_backend_enum(monkeypatch):
    topts = parse_tune_args("all_reduce", [])
    monkeypatch.setenv("NCCL_ALGO", "Ring")
    with pytest.raises(ArgumentError, match="NCCL_ALGO"):
        check_environment(topts, Backend.NCCL)
    check_environment(topts, Backend.MPI)  # MPICH does not read NCCL_ALGO
    monkeypatch.delenv("NCCL_ALGO")
    monkeypatch.setenv("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM", "ring")
    with pytest.raises(ArgumentError, match="MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"):
        check_environment(topts, Backend.MPI)
    check_environment(topts, Backend.NCCL)


def test_an_out_prefix_in_a_missing_directory_fails_before_anything_runs(ncclbench_env, tmp_path):
    import subprocess

    p = subprocess.run([sys.executable, "-m", "ncclbench", "tune", "all_reduce", "--backend", "mpi", "--nprocs", "2",
                        "-b", "8", "-e", "64", "--out", str(tmp_path / "no" / "t")],
                       capture_output=True, text=True, env=ncclbench_env, timeout=60)
    assert p.returncode == 255, p.stdout + p.stderr
    assert p.stderr.strip() == (f"ncclbench: tune --out {tmp_path}/no/t.json: cannot write in {tmp_path}/no: "
                                "the directory does not exist")
    assert p.stdout == ""  # no rank started, nothing measured

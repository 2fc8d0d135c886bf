"""Where a run or a tune happens (benchmark.orchestrate.local_ranks_to_start, read by both commands):
--nprocs N starts N ranks here, a GPU host without a launcher one per visible GPU,
a launcher's rank starts nothing."""

from __future__ import annotations

import pytest

from ncclbench.benchmark import orchestrate as benchmark
from ncclbench.benchmark.orchestrate import local_ranks_to_start
from ncclbench.core.config import Backend
from ncclbench.launch.detect import LaunchInfo
from ncclbench.run.bench_args import parse_bench_args

SINGLE, MPIRUN = LaunchInfo("single"), LaunchInfo("mpi", rank=0, size=4)


@pytest.fixture
def gpus(monkeypatch):
    monkeypatch.delenv("NCCL_TESTS_DEVICE", raising=False)

    def set_count(n: int) -> None:
        monkeypatch.setattr(benchmark, "gpu_count", lambda: n)
    return set_count


def opts(*args: str):
    return parse_bench_args("all_reduce_perf", list(args))


def test_nprocs_is_the_users_count(gpus):
    gpus(8)
    assert local_ranks_to_start(opts("--nprocs", "3"), Backend.NCCL, SINGLE) == (3, False)
    assert local_ranks_to_start(opts("--nprocs", "2"), Backend.MPI, SINGLE) == (2, False)


def test_one_rank_per_gpu_only_for_nccl_without_a_count(gpus):
    gpus(4)
    assert local_ranks_to_start(opts(), Backend.NCCL, SINGLE) == (4, True)
    assert local_ranks_to_start(opts("-g", "2"), Backend.NCCL, SINGLE) == (2, True)
    assert local_ranks_to_start(opts(), Backend.MPI, SINGLE) == (0, False)
    gpus(1)
    assert local_ranks_to_start(opts(), Backend.NCCL, SINGLE) == (0, False)


def test_a_launchers_rank_starts_nothing(gpus):
    gpus(8)
    assert local_ranks_to_start(opts("--nprocs", "3"), Backend.NCCL, MPIRUN) == (0, False)
    assert local_ranks_to_start(opts(), Backend.NCCL, MPIRUN) == (0, False)

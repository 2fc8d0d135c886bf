"""health.runtime.scan_service's shared set-up, in threads (no MPI, no GPU): the coordinator of
ranks started here (`_coordinate_local`: loopback address and token in the ranks' environment,
closed before the ranks are waited for), and where a rank finds its coordinator
(`find_coordinator`: given, or world rank 0's, told to the others over the job's channel)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from ncclbench.core.config import Backend
from ncclbench.core.errors import ArgumentError, BenchError
from ncclbench.health.core.scan import ScanConfig
from ncclbench.health.runtime import scan_service as service
from ncclbench.health.runtime.group_measure import GroupSpec
from ncclbench.health.runtime.messages import Leave

NRANKS = 3
SPEC = GroupSpec(bw_bytes=1 << 20)
OPTS = service.ServiceOptions(round_timeout_s=30.0, join_timeout_s=10.0, store=False)


def _measure(job, deadline, stage, inbox):
    """A healthy group's figures, as a rank sends them."""
    return {"nranks": len(job.members), "bw_us": 100.0, "lat_us": 20.0, "wrong": 0, "bw_bytes": SPEC.bw_bytes,
            "bw_cycles_us": [100.0] * 3, "lat_cycles_us": [20.0] * 3}


@pytest.fixture(autouse=True)
def _hosts(monkeypatch):
    monkeypatch.setenv("NCCLBENCH_HEALTH_HOST_MAP", ",".join(f"h{r}" for r in range(NRANKS)))
    monkeypatch.setenv("NCCLBENCH_HEALTH_ADDR", "127.0.0.1")
    monkeypatch.delenv("NCCLBENCH_HEALTH_PROGRESS", raising=False)
    monkeypatch.delenv(service.COORD_ENV, raising=False)
    monkeypatch.delenv(service.TOKEN_ENV, raising=False)


@dataclass
class ThreadRanks:
    """LocalRanks as threads: each joins the coordinator the environment names, as a started rank does."""

    nprocs: int
    env: dict[str, str] = field(default_factory=dict)
    ended: dict[int, tuple[int, str]] = field(default_factory=dict)
    finished: list[bool] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def start(self, env: dict[str, str]) -> None:
        self.env = env
        for r in range(self.nprocs):
            join = service.JoinPoint(env[service.COORD_ENV], env[service.TOKEN_ENV], r)
            t = threading.Thread(target=self._rank, args=(join,), daemon=True)
            t.start()
            self.threads.append(t)

    def _rank(self, join: service.JoinPoint) -> None:
        self.ended[join.rank] = service._join_and_measure(join, OPTS, _measure, None)

    def finish(self, scanned: bool) -> None:
        for t in self.threads:
            t.join(15)
        self.finished.append(scanned)


def test_ranks_started_here_meet_the_coordinator_the_environment_names(capsys):
    ranks = ThreadRanks(NRANKS)
    code = service._coordinate_local(OPTS, ScanConfig(phases=("pairs",)), SPEC, Backend.MPI, ranks)
    assert code == 0 and ranks.finished == [True]
    assert ranks.env[service.COORD_ENV].startswith("127.0.0.1:") and len(ranks.env[service.TOKEN_ENV]) == 32
    assert ranks.ended == {r: (0, Leave.FINALIZE) for r in range(NRANKS)}
    assert "CPU backend (MPI), coordinator outside the job" in capsys.readouterr().out.splitlines()[0]


def test_a_scan_that_ends_in_an_error_still_closes_and_finishes_its_ranks():
    ranks = ThreadRanks(NRANKS)
    with pytest.raises(BenchError, match=r"2 of 3 ranks reached the coordinator"):
        short = service.ServiceOptions(round_timeout_s=5.0, join_timeout_s=1.0, store=False)
        service._coordinate_local(short, ScanConfig(phases=("pairs",)), SPEC, Backend.MPI,
                                  _OneShort(ranks))
    assert ranks.finished == [False]


@dataclass
class _OneShort:
    """ThreadRanks of which the last never starts."""

    ranks: ThreadRanks

    @property
    def nprocs(self) -> int:
        return self.ranks.nprocs

    def start(self, env: dict[str, str]) -> None:
        self.ranks.nprocs -= 1
        self.ranks.start(env)
        self.ranks.nprocs += 1

    def finish(self, scanned: bool) -> None:
        self.ranks.finish(scanned)


class FakeJob:
    """The job's host channel: who this rank is, and world rank 0's broadcast."""

    def __init__(self, rank: int, size: int, said: tuple[str, str] | None = None):
        self.rank, self.size, self.said = rank, size, said
        self.sent: list[tuple[str, str]] = []

    def bcast(self, obj, root=0):
        self.sent.append(obj)
        return obj if self.rank == root else self.said


def test_a_given_coordinator_is_joined_without_forming_the_job(monkeypatch):
    monkeypatch.setenv(service.TOKEN_ENV, "tok")
    opts = service.ServiceOptions(coordinator="10.0.0.1:7000")
    join = service.find_coordinator(opts, ScanConfig(), SPEC, Backend.NCCL, 5,
                                    lambda: pytest.fail("the job was formed"))
    assert (join.where, join.token, join.rank, join.job, join.thread) == ("10.0.0.1:7000", "tok", 5, None, None)
    monkeypatch.delenv(service.TOKEN_ENV)
    with pytest.raises(ArgumentError, match="needs the coordinator's token"):
        service.find_coordinator(opts, ScanConfig(), SPEC, Backend.NCCL, 5, lambda: FakeJob(5, 8))


def test_world_rank_0_coordinates_and_tells_the_others_where():
    job0 = FakeJob(0, NRANKS)
    first = service.find_coordinator(OPTS, ScanConfig(phases=("pairs",)), SPEC, Backend.MPI, 0, lambda: job0)
    assert first.job is job0 and first.thread is not None and first.rank == 0
    assert job0.sent == [(first.where, first.token)] and first.where.startswith("127.0.0.1:")
    joins = [first] + [service.find_coordinator(OPTS, ScanConfig(), SPEC, Backend.MPI, 0,
                                                lambda r=r: FakeJob(r, NRANKS, (first.where, first.token)))
                       for r in range(1, NRANKS)]
    assert [(j.rank, j.where, j.token, j.thread is None) for j in joins[1:]] == \
        [(r, first.where, first.token, True) for r in range(1, NRANKS)]
    ended: dict[int, tuple[int, str]] = {}

    def rank(join: service.JoinPoint) -> None:
        ended[join.rank] = service._join_and_measure(join, OPTS, _measure, None)

    threads = [threading.Thread(target=rank, args=(j,), daemon=True) for j in joins]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert ended == {r: (0, Leave.FINALIZE) for r in range(NRANKS)} and first.result == {"code": 0}

"""A failure inside the coordinator (a bug in the scan, not a fault of the fleet) ends the scan at
once on every rank: one line naming the error, exit 1 (internal error), no traceback.  Issue 25's
GPU visit (healthy3): the coordinator thread on world rank 0 died with a traceback and every rank
waited 90 s for it ("the coordinator sent nothing for 90 s; giving up", exit 4)."""

import threading
import time

import pytest

from ncclbench.core.errors import ExitCode
from ncclbench.health.core import pair_phase as pairs
from ncclbench.health.core.scan import ScanConfig
from ncclbench.health.runtime import scan_service as service
from ncclbench.health.runtime.group_measure import GroupSpec

NRANKS = 4
SPEC = GroupSpec(bw_bytes=1 << 20)


def _measure(job, deadline, stage, inbox):
    """A healthy group's figures, as a rank sends them (no MPI or GPU needed)."""
    n = len(job.members)
    return {"nranks": n, "bw_us": 100.0, "lat_us": 20.0, "wrong": 0, "bw_bytes": SPEC.bw_bytes,
            "bw_cycles_us": [100.0] * 3, "lat_cycles_us": [20.0] * 3}


@pytest.fixture
def broken_round_two(monkeypatch):
    """The scan's second pair round raises, as the confirmation round did on the GPUs."""
    real = pairs.make_round

    def make_round(phase, index, purpose, groups, controls=()):
        if index == 2:
            raise ValueError(f"{phase} round {index}: GPU (1, 0) is in two groups")
        return real(phase, index, purpose, groups, controls)

    monkeypatch.setattr(pairs, "make_round", make_round)
    monkeypatch.setenv("NCCLBENCH_HEALTH_HOST_MAP", ",".join(f"h{r}" for r in range(NRANKS)))
    monkeypatch.setenv("NCCLBENCH_HEALTH_ADDR", "127.0.0.1")
    monkeypatch.delenv("NCCLBENCH_HEALTH_PROGRESS", raising=False)


def _scan(opts: service.ServiceOptions) -> tuple[dict[int, tuple[int, str]], float]:
    """A launched job's ranks in threads, world rank 0 coordinating in a thread beside its rank
    (the path of issue 25's healthy3): (rank -> (exit code, how it left), wall seconds)."""
    coordinating = service._coordinator_thread(NRANKS, opts, ScanConfig(phases=("pairs",)), SPEC, "test")
    ended: dict[int, tuple[int, str]] = {}

    def rank(r: int) -> None:
        join = coordinating if r == 0 else service.JoinPoint(coordinating.where, coordinating.token, r)
        ended[r] = service._join_and_measure(join, opts, _measure, None)

    t0 = time.monotonic()
    ranks = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(NRANKS)]
    for t in ranks:
        t.start()
    for t in ranks:
        t.join(timeout=max(0.0, t0 + 15 - time.monotonic()))
    assert not any(t.is_alive() for t in ranks), "ranks still waiting for a coordinator that failed"
    return ended, time.monotonic() - t0


def test_a_failure_inside_the_scan_ends_every_rank_at_once_with_one_line(broken_round_two, monkeypatch, capfd):
    uncaught: list = []
    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    ended, wall = _scan(service.ServiceOptions(round_timeout_s=30.0, join_timeout_s=10.0, store=False))
    assert wall < 10  # at once, not after the ranks' 90 s of silence
    assert ended == {r: (int(ExitCode.INTERNAL), "exit") for r in range(NRANKS)}
    assert not uncaught  # the coordinator thread did not die with an exception
    err = capfd.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines == ["ncclbench: health: internal error in the coordinator: ValueError: pairs round 2: "
                     "GPU (1, 0) is in two groups; the scan ended without a verdict"], err


def test_a_failure_after_the_verdict_is_one_line_and_exit_1_on_the_coordinating_rank(monkeypatch, capfd):
    """An output hook (metrics, drain action) that fails after the ranks were dismissed: the
    coordinating rank ends 1 with one line, the others with the scan's own code."""
    uncaught: list = []
    monkeypatch.setattr(threading, "excepthook", uncaught.append)
    monkeypatch.setenv("NCCLBENCH_HEALTH_HOST_MAP", ",".join(f"h{r}" for r in range(NRANKS)))
    monkeypatch.setenv("NCCLBENCH_HEALTH_ADDR", "127.0.0.1")

    def hook(outcome):
        raise OSError("metrics file: read-only file system")

    ended, _ = _scan(service.ServiceOptions(round_timeout_s=30.0, join_timeout_s=10.0, store=False, after_scan=hook))
    assert ended[0] == (int(ExitCode.INTERNAL), "finalize") and not uncaught
    assert {ended[r] for r in (1, 2, 3)} == {(int(ExitCode.OK), "finalize")}  # the verdict: 4 equal hosts healthy
    captured = capfd.readouterr()
    assert "ncclbench: health: internal error in the coordinator: OSError: metrics file: read-only file system" \
        in captured.err.splitlines()
    assert "Traceback" not in captured.err + captured.out

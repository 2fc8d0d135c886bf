"""ThreadTeam: host collectives across -t threads and then across processes."""

from __future__ import annotations

import threading

import pytest

from ncclbench.backends.threads import ThreadTeam, merge_threads, on_each_thread
from ncclbench.launch.hostcomm import HostComm


class CountingHost(HostComm):
    """A world of `size` processes simulated by fixed remote contributions;
    records which thread called it."""

    def __init__(self, remote: float = 0.0):
        self.rank, self.size = 0, 2
        self.remote = remote
        self.callers: list[str] = []

    def _note(self):
        self.callers.append(threading.current_thread().name)

    def barrier(self):
        self._note()

    def allreduce(self, value, op):
        self._note()
        return {"sum": value + self.remote, "min": min(value, self.remote),
                "max": max(value, self.remote)}[op]

    def gather(self, obj, root=0):
        self._note()
        return [obj, "remote"]

    def bcast(self, obj, root=0):
        self._note()
        return obj


def _run(team: ThreadTeam, fn, nthreads: int) -> list:
    out = [None] * nthreads
    errors = []

    def body(t):
        try:
            out[t] = fn(t)
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(t,), name=f"w{t}") for t in range(nthreads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=20)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    if errors:
        raise errors[0]
    return out


def test_single_thread_goes_straight_to_host():
    host = CountingHost(remote=5)
    team = ThreadTeam(1, host)
    assert team.allreduce(2.0, "sum") == 7.0
    assert team.allreduce(2.0, "min") == 2.0
    assert team.gather([1, 2]) == [[1, 2], "remote"]
    team.barrier()
    assert len(host.callers) == 4


@pytest.mark.parametrize("op,expected", [("sum", 0 + 1 + 2 + 3 + 10), ("min", 0), ("max", 10)])
def test_allreduce_over_threads_then_processes(op, expected):
    host = CountingHost(remote=10)
    team = ThreadTeam(4, host)
    results = _run(team, lambda t: team.allreduce(float(t), op, t), 4)
    assert results == [expected] * 4
    assert host.callers == ["w0"]  # one host call, made by thread 0


def test_many_rounds_in_a_row_stay_consistent():
    host = CountingHost(remote=0)
    team = ThreadTeam(3, host)

    def body(t):
        return [team.allreduce(float(t + k), "max", t) for k in range(50)]

    results = _run(team, body, 3)
    assert all(r == [float(2 + k) for k in range(50)] for r in results)
    assert len(host.callers) == 50


def test_gather_merges_threads_elementwise():
    host = CountingHost()
    team = ThreadTeam(2, host)
    results = _run(team, lambda t: team.gather([1.0 + t, 5.0 - t], t), 2)
    assert results[0] == [[2.0, 5.0], "remote"]
    assert results[1] == results[0]
    per_thread = _run(team, lambda t: team.gather_threads(f"dev{t}", t), 2)
    assert per_thread[0] == [["dev0", "dev1"], "remote"]


def test_merge_threads_rules():
    assert merge_threads([[1, 5], [3, 2]]) == [3, 5]
    assert merge_threads([["a"], ["b", "c"]]) == ["a", "b", "c"]
    assert merge_threads([[1, 2], [1]]) == [1, 2, 1]
    assert merge_threads(["x", "y"]) == "x"
    assert merge_threads([("only",)]) == ("only",)


def test_host_failure_reaches_every_thread():
    class Failing(CountingHost):
        def barrier(self):
            raise RuntimeError("peer died")

    team = ThreadTeam(3, Failing())
    seen = []

    def body(t):
        try:
            team.barrier(t)
        except RuntimeError as exc:
            seen.append(str(exc))

    _run(team, body, 3)
    assert seen == ["peer died"] * 3


def test_abort_releases_waiting_threads():
    team = ThreadTeam(2, CountingHost())
    released = []

    def waiter():
        try:
            team.barrier(1)
        except threading.BrokenBarrierError:
            released.append(True)

    th = threading.Thread(target=waiter)
    th.start()
    team.abort()
    th.join(timeout=10)
    assert released == [True]


def test_on_each_thread_runs_the_calls_at_once_zero_in_the_caller():
    team = ThreadTeam(3, CountingHost(remote=1.0))
    names: list[str] = [""] * 3

    def body(i: int) -> float:
        names[i] = threading.current_thread().name
        return team.allreduce(float(i), "sum", thread=i)  # meets the others: one at a time would hang

    assert on_each_thread(3, body, name="w") == [4.0, 4.0, 4.0]
    assert names == [threading.current_thread().name, "w1", "w2"]


def test_on_each_thread_joins_all_then_raises_the_first_failure_by_index():
    done: list[int] = []

    def body(i: int) -> int:
        if i in (1, 2):
            raise ValueError(f"thread {i}")
        done.append(i)
        return i

    with pytest.raises(ValueError, match="thread 1"):
        on_each_thread(4, body)
    assert sorted(done) == [0, 3]
    assert on_each_thread(1, lambda i: i + 7) == [7]

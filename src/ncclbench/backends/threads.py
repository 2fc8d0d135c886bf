"""Host-side collectives across the `-t` threads of a process, then across processes;
and `on_each_thread`, which runs one call per -t thread at once.

nccl-tests runs T threads per process; its Barrier/Allreduce first meet the
threads of the process and then let one thread talk to MPI.  `ThreadTeam`
does the same over any `HostComm`: every thread calls the same method in
the same order; the threads meet, thread 0 alone calls the HostComm (which
need not be thread-safe), and the result is handed to all of them.  With
T = 1 every call goes straight to the HostComm, with no locking at all.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from ..launch.hostcomm import HostComm

R = TypeVar("R")

_OPS: dict[str, Callable[[Sequence[float]], float]] = {"sum": sum, "min": min, "max": max}


def merge_threads(objs: Sequence[Any]) -> Any:
    """Default way the T threads' objects become one per process for `gather`:

    * equal-length lists of numbers -> element-wise max (the per-iteration
      timing rule, docs/behaviour.md §3.7: max over the process's threads);
    * other lists -> concatenated in thread order (e.g. device lines);
    * anything else -> thread 0's object.
    With one thread the object is returned unchanged."""
    first = objs[0]
    if len(objs) == 1:
        return first
    if all(isinstance(o, (list, tuple)) for o in objs):
        numeric = all(isinstance(v, (int, float)) for o in objs for v in o)
        if numeric and all(len(o) == len(first) for o in objs):
            return [max(col) for col in zip(*objs)]
        return [v for o in objs for v in o]
    return first


def on_each_thread(n: int, body: Callable[[int], R], name: str = "ncclbench-t") -> list[R]:
    """body(0) ... body(n-1) at once, one per -t thread of this process: 0 in the calling
    thread, the others in threads `name`1 ...; returns their results in order.

    Why at once: the calls meet in the workers' host collectives (`ThreadTeam`), so one
    thread alone would wait forever.  Every thread is joined before anything is raised; the
    first failure by index is then raised here, so no thread's error is lost to stderr."""
    if n == 1:
        return [body(0)]
    results: list[Any] = [None] * n
    failures: list[BaseException | None] = [None] * n

    def run(i: int) -> None:
        try:
            results[i] = body(i)
        except BaseException as exc:  # re-raised in the calling thread below
            failures[i] = exc

    threads = [threading.Thread(target=run, args=(i,), name=f"{name}{i}") for i in range(1, n)]
    for t in threads:
        t.start()
    run(0)
    for t in threads:
        t.join()
    first = next((f for f in failures if f is not None), None)
    if first is not None:
        raise first
    return results


class ThreadTeam:
    """barrier / allreduce / gather / bcast for T threads of one process over `host`."""

    def __init__(self, nthreads: int, host: HostComm):
        if nthreads < 1:
            raise ValueError("a thread team needs at least one thread")
        self.nthreads = nthreads
        self.host = host
        self._slots: list[Any] = [None] * nthreads
        self._result: Any = None
        self._error: BaseException | None = None
        self._barrier = threading.Barrier(nthreads) if nthreads > 1 else None

    def abort(self) -> None:
        """Release threads blocked in the team (after a failure in one thread):
        they get threading.BrokenBarrierError instead of waiting forever."""
        if self._barrier is not None:
            self._barrier.abort()

    # -- the one pattern every call follows ----------------------------------------------
    def _exchange(self, thread: int, value: Any, leader_fn: Callable[[list[Any]], R]) -> R:
        if self._barrier is None:
            return leader_fn([value])
        self._slots[thread] = value
        self._barrier.wait()  # all values deposited
        if thread == 0:
            try:
                self._result, self._error = leader_fn(list(self._slots)), None
            except BaseException as exc:  # hand the failure to every thread
                self._result, self._error = None, exc
        self._barrier.wait()  # result published
        if self._error is not None:
            raise self._error
        return cast(R, self._result)  # what leader_fn returned on thread 0

    # -- public calls --------------------------------------------------------------------
    def barrier(self, thread: int = 0) -> None:
        self._exchange(thread, None, lambda _: self.host.barrier())

    def allreduce(self, value: float, op: str, thread: int = 0) -> float:
        """Combine one number over every thread of every process; op 'sum', 'min' or 'max'."""
        combine = _OPS[op]
        return self._exchange(thread, value, lambda vals: self.host.allreduce(combine(vals), op))

    def gather(self, obj: Any, thread: int = 0, root: int = 0,
               combine: Callable[[Sequence[Any]], Any] = merge_threads) -> list[Any] | None:
        """One object per world process at `root` (None elsewhere); the T
        threads' objects are first merged by `combine`."""
        return self._exchange(thread, obj, lambda objs: self.host.gather(combine(objs), root))

    def gather_threads(self, obj: Any, thread: int = 0, root: int = 0) -> list[list[Any]] | None:
        """Every thread's object: a list per world process of T objects at `root`."""
        return self._exchange(thread, obj, lambda objs: self.host.gather(list(objs), root))

    def allgather_threads(self, obj: Any, thread: int = 0) -> list[list[Any]]:
        """Like gather_threads, but every thread of every process gets the result."""
        return self._exchange(thread, obj, lambda objs: self.host.allgather(list(objs)))

    def bcast(self, obj: Any, thread: int = 0, root: int = 0) -> Any:
        """World process `root`'s thread-0 object, to every thread of every process."""
        return self._exchange(thread, obj, lambda objs: self.host.bcast(objs[0], root))

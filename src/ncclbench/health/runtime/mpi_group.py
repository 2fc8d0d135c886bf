"""One group's measurement on the CPU backend: all_reduce at two sizes on a
communicator made for the group alone, timed by the harness's own loop.

The communicator is made with MPI_Comm_create_group over the world, which
only the group's members take part in, so a rank that stopped elsewhere in
the fleet cannot hold it up (MPI_Comm_split would need every rank of the
world).  Every MPI call of the measurement - the collective in the timed
loop, the barrier, the check's sum - is non-blocking and polled against the
round's deadline: a member that stopped answering makes the others give up
at the deadline and report so, instead of hanging with it.  Members first
exchange a "ready" message (point to point, also polled), because creating
the communicator itself cannot be abandoned once entered.

Timing is `group_measure.measure_sizes` (the harness's nccl-tests loop: untimed op,
barrier, iters timed ops, bit-exact check), `cycles` times per size; the
group's figure is the median cycle.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...backends.mpi_cpu import ALIGN, HostMemoryWorker, MpiCommunicator, aligned_address
from ...backends.worker import RankSlot
from ...core.datatypes import DataType, RedOp
from ...core.errors import BenchError, ExitCode
from .group_measure import GroupSpec, GroupTimeout, measure_sizes

__all__ = ["GroupSpec", "GroupTimeout", "GroupWorker", "measure_group", "ready_exchange"]

_GRAVEYARD: list[Any] = []  # abandoned requests and their buffers stay alive (MPI may still touch them)


def _wait(req: Any, deadline: float, what: str) -> None:
    """Poll until done; past the deadline, abandon the request.  The poll yields the
    CPU between tests: ranks that share cores (many per host, or an oversubscribed
    test machine) otherwise starve the very peer they wait for."""
    if req.Test():
        return
    while not req.Test():
        if time.monotonic() > deadline:
            _GRAVEYARD.append(req)
            raise GroupTimeout(what)
        os.sched_yield()


class DeadlineComm(MpiCommunicator):
    """MpiCommunicator whose all_reduce is MPI_Iallreduce polled against a deadline."""

    def __init__(self, comm: Any, scratch: np.ndarray, deadline: float):
        super().__init__(comm, scratch)
        self.deadline = deadline

    def all_reduce(self, send: int, recv: int, count: int, dtype: DataType, op: RedOp) -> None:
        src = self.MPI.IN_PLACE if send == recv else self._buf(send, count, dtype, True)
        _wait(self.comm.Iallreduce(src, self._buf(recv, count, dtype, True), self._op(op)),
              self.deadline, "all_reduce")

    def compile(self, calls: list[tuple[str, tuple]]) -> Callable[[], None]:
        if len(calls) == 1 and calls[0][0] == "all_reduce":
            send, recv, count, dtype, op = calls[0][1]
            src = self.MPI.IN_PLACE if send == recv else self._buf(send, count, dtype, True)
            dst, mop, iallreduce, deadline = self._buf(recv, count, dtype, True), self._op(op), \
                self.comm.Iallreduce, self.deadline
            return lambda: _wait(iallreduce(src, dst, mop), deadline, "all_reduce")
        return super().compile(calls)


class GroupWorker(HostMemoryWorker):
    """The harness's Worker for one rank of one health group (host memory, one rank)."""

    backend_name = "mpi"

    def __init__(self, comm: Any, max_bytes: int, deadline: float):
        from mpi4py import MPI

        self.MPI, self.group, self.deadline = MPI, comm, deadline
        self.nranks = comm.Get_size()
        self.max_bytes = max_bytes
        self._send = np.zeros(max_bytes + ALIGN, dtype=np.uint8)
        self._recv = np.zeros(max_bytes + ALIGN, dtype=np.uint8)
        self._scratch = np.zeros(max_bytes // max(1, self.nranks) + 64, dtype=np.uint8)
        _GRAVEYARD.append((self._send, self._recv, self._scratch))  # an abandoned op may still write here
        self.comm = DeadlineComm(comm, self._scratch, deadline)
        self.slots = [RankSlot(comm.Get_rank(), self.comm, aligned_address(self._send), aligned_address(self._recv), -1)]

    @property
    def is_reporter(self) -> bool:
        return self.group.Get_rank() == 0

    def wait(self) -> None:
        pass  # calls complete inside _wait

    def barrier(self) -> None:
        _wait(self.group.Ibarrier(), self.deadline, "barrier")

    def allreduce_host(self, value: float, op: str) -> float:
        mpi_op = {"sum": self.MPI.SUM, "min": self.MPI.MIN, "max": self.MPI.MAX}[op]
        send, recv = np.array([value], dtype=np.float64), np.zeros(1, dtype=np.float64)
        _wait(self.group.Iallreduce(send, recv, mpi_op), self.deadline, "check")
        return float(recv[0])

    def gather_host(self, obj: Any) -> list[Any] | None:
        """Not part of a group's measurement (run.timing uses barrier and allreduce_host):
        a group's figures reach the coordinator over TCP, so a call here is a programming error."""
        raise BenchError("health: a group's worker has no gather (each rank sends its figures to the "
                         "coordinator over TCP)", ExitCode.INTERNAL)


def ready_exchange(p2p: Any, me: int, members: Sequence[int], tag: int, deadline: float) -> None:
    """Every member tells every other it is here; GroupTimeout names who is not."""
    reqs: list[tuple[int | None, Any]] = []
    flags = {}
    for peer in members:
        if peer == me:
            continue
        flag = np.zeros(1, dtype=np.int32)
        flags[peer] = flag
        reqs.append((peer, p2p.Irecv(flag, source=peer, tag=tag)))
        reqs.append((None, p2p.Isend(np.ones(1, dtype=np.int32), dest=peer, tag=tag)))
    pending = list(reqs)
    while pending:
        pending = [(peer, r) for peer, r in pending if not r.Test()]
        if pending and time.monotonic() > deadline:
            _GRAVEYARD.append((reqs, flags))
            silent = sorted({peer for peer, _ in pending if peer is not None})
            raise GroupTimeout("rank(s) " + ", ".join(map(str, silent)) + " never joined the group"
                               if silent else "the group's ready messages were not delivered")


def measure_group(world: Any, p2p: Any, members: Sequence[int], spec: GroupSpec, tag: int,
                  deadline: float, stage: list[str] | None = None) -> dict:
    """This rank's part of one group: {"bw_us", "lat_us", "wrong"} (medians over cycles).
    `stage[0]` says what it is doing (for a watchdog that reports a rank stuck in a
    call that cannot be abandoned)."""
    stage = stage if stage is not None else [""]
    me = world.Get_rank()
    stage[0] = "waiting for the group's members"
    ready_exchange(p2p, me, members, tag, deadline)
    stage[0] = "creating the group's communicator (MPI_Comm_create_group cannot be abandoned)"
    comm = world.Create_group(world.Get_group().Incl(list(members)), tag)
    stage[0] = "measuring"
    comm.Set_errhandler(world.Get_errhandler())
    return measure_sizes(GroupWorker(comm, spec.max_bytes, deadline), spec)

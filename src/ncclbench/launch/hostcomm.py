"""Process-level communication on the host: the glue every launcher provides.

The harness needs very little between processes besides the collectives
under test: a barrier, combining a number (times, error counts), gathering
small objects to rank 0 (device lines, per-iteration rows) and broadcasting
the NCCL unique id.  `HostComm` is that interface; implementations exist
for MPI (mpi4py), a TCP rendezvous (no MPI) and a single process.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, cast

from ..core.errors import BenchError


class HostComm(ABC):
    rank: int  # world process index
    size: int  # world process count

    @abstractmethod
    def barrier(self) -> None: ...

    @abstractmethod
    def allreduce(self, value: float, op: str) -> float:
        """op: 'sum', 'min' or 'max'."""

    @abstractmethod
    def gather(self, obj: Any, root: int = 0) -> list[Any] | None: ...

    @abstractmethod
    def bcast(self, obj: Any, root: int = 0) -> Any: ...

    def allgather(self, obj: Any) -> list[Any]:
        return cast("list[Any]", self.bcast(self.gather(obj, 0), 0))

    def split(self, color: int, key: int) -> HostComm:
        """Sub-communicator of the processes with the same color (NCCL_TESTS_SPLIT)."""
        raise ValueError(f"{type(self).__name__} cannot split")

    def abort(self, code: int = 1, message: str = "") -> None:
        """Best effort: end the whole job (used when a rank fails); `message`
        says why (the TCP rendezvous passes it to every rank)."""

    def add_failure_callback(self, cb: Callable[[BenchError], None]) -> None:
        """Call `cb` (from another thread) when a peer process is found dead, so
        that no rank stays stuck in a device wait.  Default: this communicator
        cannot tell (MPI ends the job itself; a single process has no peers)."""

    def close(self) -> None:
        pass


class SingleHostComm(HostComm):
    """A world of one process."""

    rank = 0
    size = 1

    def barrier(self) -> None:
        pass

    def allreduce(self, value: float, op: str) -> float:
        return value

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        return [obj]

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return obj

    def split(self, color: int, key: int) -> HostComm:
        return self


_MPI_OPS = {"sum": "SUM", "min": "MIN", "max": "MAX"}


class MpiHostComm(HostComm):
    """mpi4py's COMM_WORLD (or a split of it)."""

    def __init__(self, comm: Any = None):
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def barrier(self) -> None:
        self.comm.Barrier()

    def allreduce(self, value: float, op: str) -> float:
        return cast(float, self.comm.allreduce(value, op=getattr(self._MPI, _MPI_OPS[op])))

    def gather(self, obj: Any, root: int = 0) -> list[Any] | None:
        return self.comm.gather(obj, root=root)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self.comm.bcast(obj, root=root)

    def allgather(self, obj: Any) -> list[Any]:
        return self.comm.allgather(obj)

    def split(self, color: int, key: int) -> HostComm:
        return MpiHostComm(self.comm.Split(color, key))

    def abort(self, code: int = 1, message: str = "") -> None:
        from .shutdown import note_for_launcher

        note_for_launcher(ending=f"ended the job (MPI_Abort {code})" + (f": {message}" if message else ""))
        self.comm.Abort(code)

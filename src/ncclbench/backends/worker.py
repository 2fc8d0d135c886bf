"""The narrow interface between the harness and a backend.

A `Worker` is one host thread's view: the ranks it drives (one per GPU for
NCCL, exactly one for MPI), their buffers, and the handful of operations
the harness needs around the collectives themselves: wait for completion,
barrier, combine numbers across the world, fill and check buffers from
`Fill` descriptions, per-iteration timers and graph capture.  The harness
(`ncclbench.run`) is written only against this class, so both backends
run the same timing and checking code.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ..collectives.collective import Collective, Communicator
from ..core.datatypes import DataType, RedOp
from ..core.errors import UnsupportedError
from ..core.fills import Fill
from ..core.results import DeviceInfo


@dataclass
class RankSlot:
    """One rank driven by this worker."""

    rank: int  # rank in its communicator
    comm: Communicator
    send: int  # send buffer base address (unalign shift already applied)
    recv: int  # recv buffer base address (unalign shift already applied)
    device: int = -1  # CUDA ordinal, -1 for host memory


class IterationTimer(ABC):
    """Per-iteration timing (-I): `record(j)` marks the start of iteration j on
    every local rank (j = iters marks the end); after `Worker.wait()`,
    `samples_us()` gives one value per iteration (max over local ranks)."""

    @abstractmethod
    def record(self, j: int) -> None: ...

    @abstractmethod
    def samples_us(self) -> list[float]: ...


class TimedBatch(ABC):
    """Every op of one timed loop, run by the backend in one go (the C loop)."""

    @abstractmethod
    def issue_first(self) -> None:
        """Issue op 0 alone, untimed (the warm-up op before the barrier)."""

    @abstractmethod
    def run(self) -> tuple[float, float]:
        """Read the clock, issue every op, wait for completion (-T applies),
        read it again: (enqueue seconds, completion seconds), both from the start."""


TIMED_DATA_SEED = 99  # nccl-tests initialises the timed run's inputs with seed 99


class Worker(ABC):
    """One host thread's handle on its ranks.  See module docstring.

    Everything the harness, the run plan and the banner use is declared here;
    the optional parts have defaults, so nothing is probed with getattr."""

    backend_name: str = "?"
    slots: Sequence[RankSlot]
    nranks: int  # ranks per communicator
    # Usable bytes of each send/recv buffer, the same on every worker of the world.
    # The backend lowers it when the buffers would not fit (nccl-tests' memory
    # clamp); the run plan's sweep never goes beyond it.
    max_bytes: int
    supports_graphs: bool = False
    notes: Sequence[str] = ()  # banner notes of the backend (`# ncclbench: ...` lines)
    # The seed of the inputs the timed loop runs on with -c (docs/behaviour.md §4.1).
    timed_data_seed: int = TIMED_DATA_SEED

    # -- identity of the library -------------------------------------------------------
    @property
    def nccl_version_code(self) -> int | None:
        """The loaded libnccl's runtime version code (22809), None without NCCL."""
        return None

    def library_description(self) -> str:
        """The communication library, for the banner and the store ("libnccl 2.28.9 (...)")."""
        return self.backend_name

    def unsupported_reason(self, coll: Collective, dtype: DataType, op: RedOp) -> str | None:
        """Why this backend/library/GPU set cannot run (dtype, op) of `coll`, or
        None.  The run plan refuses an explicit choice and trims `-d all` / `-o all`."""
        return None

    # -- completion and synchronisation -------------------------------------------------
    @abstractmethod
    def wait(self) -> None:
        """Wait until everything issued on this worker's ranks has completed
        (raises BenchError with TIMEOUT after -T seconds)."""

    @abstractmethod
    def barrier(self) -> None:
        """Barrier across every worker of every world process."""

    @abstractmethod
    def allreduce_host(self, value: float, op: str) -> float:
        """Combine one number across every worker of the world: op is 'sum', 'min' or 'max'."""

    @abstractmethod
    def gather_host(self, obj: Any) -> list[Any] | None:
        """Gather one object per world *process* to world rank 0 (None elsewhere)."""

    @property
    @abstractmethod
    def is_reporter(self) -> bool:
        """True on the one worker that prints (world process 0, thread 0)."""

    # -- grouping ----------------------------------------------------------------------
    def group_start(self) -> None:
        """Open a group around calls for several local ranks / aggregated ops."""

    def group_end(self) -> None:
        """Close the group opened by group_start."""

    # -- data --------------------------------------------------------------------------
    @abstractmethod
    def zero(self, slot: RankSlot, ptr: int, nbytes: int) -> None: ...

    @abstractmethod
    def fill(self, slot: RankSlot, ptr: int, fills: Sequence[Fill], dtype: DataType, op: RedOp) -> None:
        """Write the generator values described by `fills` at `ptr`."""

    @abstractmethod
    def count_wrong(self, slot: RankSlot, ptr: int, count: int, fills: Sequence[Fill],
                    dtype: DataType, op: RedOp) -> int:
        """Compare `count` elements at `ptr` with `fills`, bit-exactly (2 ULP for
        float avg); return the number of wrong elements.  Regions not covered by
        any fill are not compared."""

    # -- optional features ---------------------------------------------------------------
    def native_batch(self, ops: Sequence[Sequence[tuple[Any, str, tuple[Any, ...]]]]) -> TimedBatch | None:
        """The plain timed loop's ops (each: (communicator, primitive call, args)
        in issue order) as one batch the backend runs outside Python, or None to
        run them through the prepared callables.  Default: None."""
        return None

    def iteration_timer(self, nevents: int) -> IterationTimer:
        raise UnsupportedError(f"per-iteration timing (-I) is not supported by the {self.backend_name} backend")

    def begin_capture(self) -> None:
        raise UnsupportedError(f"CUDA graphs (-G) are not supported by the {self.backend_name} backend")

    def end_capture(self) -> Any:
        raise UnsupportedError(f"CUDA graphs (-G) are not supported by the {self.backend_name} backend")

    def abandon_capture(self) -> None:
        """End a capture that an error interrupted, dropping what it caught, so
        the cleanup after the error does not run on capturing streams."""

    def launch_graph(self, graph: Any, times: int) -> None:
        raise UnsupportedError(f"CUDA graphs (-G) are not supported by the {self.backend_name} backend")

    def destroy_graph(self, graph: Any) -> None:
        raise UnsupportedError(f"CUDA graphs (-G) are not supported by the {self.backend_name} backend")

    # -- the gate's rounds (run/gate_rounds.py) ------------------------------------------
    @contextlib.contextmanager
    def fresh_communicators(self) -> Iterator[str]:
        """For the body of the `with`, every slot's communicator is a fresh one of the same ranks
        (collective: every worker of the world enters it together); yields how, for the run's
        line ('in a fresh NCCL communicator').  Default: the run's own communicator."""
        yield "on the run's communicator"

    # -- identity ----------------------------------------------------------------------
    def devices(self) -> list[DeviceInfo]:
        """This worker's `# Using devices` lines."""
        return []

    def gather_devices(self) -> list[DeviceInfo] | None:
        """Every device line of the world, in world order, at the reporter (None
        elsewhere).  Collective: every worker of every process calls it."""
        rows = self.gather_host(self.devices())
        return None if rows is None else [d for row in rows for d in row]

    def abort(self) -> None:
        """Stop everything in flight (a peer failed); default: nothing to stop."""

    def memory_report(self) -> str | None:
        """The `-M` footer line, or None when the backend cannot measure it."""
        return None

    def close(self) -> None:
        """Release buffers and communicators."""

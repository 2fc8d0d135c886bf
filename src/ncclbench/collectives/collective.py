"""What a collective is, to the harness: counts, bandwidth rules, how to launch
it on a communicator, and what its buffers must hold before and after.

One small module per collective fills in this table (the way nccl-tests has
one .cu file per collective over a shared harness).  The harness only ever
talks to `Collective`; backends only ever implement `Communicator`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..core.datatypes import DataType, RedOp
from ..core.fills import Fill


class Communicator(Protocol):
    """One rank's view of a communicator: NCCL-shaped primitives on raw
    buffer addresses (ints).  Counts are in elements of `dtype`.

    Calls are *enqueued* (GPU) or executed (CPU); completion is the backend's
    `wait()`.  `op` is the run's reduction op; a backend creates per-call
    ops such as premultiplied sum itself, inside the call, as nccl-tests does.
    """

    rank: int
    nranks: int

    def all_reduce(self, send: int, recv: int, count: int, dtype: DataType, op: RedOp) -> None: ...
    def broadcast(self, send: int, recv: int, count: int, dtype: DataType, root: int) -> None: ...
    def reduce(self, send: int, recv: int, count: int, dtype: DataType, op: RedOp, root: int) -> None: ...
    def all_gather(self, send: int, recv: int, count: int, dtype: DataType) -> None: ...
    def reduce_scatter(self, send: int, recv: int, count: int, dtype: DataType, op: RedOp) -> None: ...
    def alltoall(self, send: int, recv: int, count: int, dtype: DataType) -> None: ...
    def gather(self, send: int, recv: int, count: int, dtype: DataType, root: int) -> None: ...
    def scatter(self, send: int, recv: int, count: int, dtype: DataType, root: int) -> None: ...
    def send(self, buf: int, count: int, dtype: DataType, peer: int) -> None: ...
    def recv(self, buf: int, count: int, dtype: DataType, peer: int) -> None: ...
    def group_start(self) -> None: ...
    def group_end(self) -> None: ...
    def local_copy(self, dst: int, src: int, nbytes: int) -> None: ...

    # Pre-binding for the timed loop (run.timing.Placement.prepared): return a
    # zero-argument callable that issues the recorded calls with every argument
    # already converted, or None when the backend cannot (the calls then go through
    # the methods above).  `compile_group` takes several local ranks' calls in issue
    # order, as (communicator, call, args).
    def compile(self, calls: list[tuple[str, tuple[Any, ...]]]) -> Callable[[], None] | None: ...
    def compile_group(self, items: list[tuple[Any, str, tuple[Any, ...]]]) -> Callable[[], None] | None: ...


@dataclass(frozen=True)
class Counts:
    """Element counts of one call (docs/behaviour.md §2.8)."""

    send_count: int
    recv_count: int
    param_count: int  # the count passed to the call and printed in the `count` column

    def size_bytes(self, itemsize: int) -> int:
        """The printed `size` column: the larger of the two buffers."""
        return max(self.send_count, self.recv_count) * itemsize


@dataclass(frozen=True)
class CallArgs:
    """Everything one rank needs to launch or check one call."""

    dtype: DataType
    op: RedOp
    root: int
    rank: int
    nranks: int
    counts: Counts


def round_down_16(count: int, itemsize: int) -> int:
    """Round an element count down so that it spans a multiple of 16 bytes."""
    per16 = max(1, 16 // itemsize)
    return count - (count % per16)


def per_rank_base(count: int, nranks: int, itemsize: int) -> int:
    """`base = down(floor(count / n))` of docs/behaviour.md §2.8."""
    return round_down_16(count // nranks, itemsize)


class Collective(ABC):
    """Static description of one collective.  Subclasses are stateless."""

    name: str  # e.g. "all_reduce"
    reduces: bool = False  # loops over -o ops (and prints the op name)
    rooted: bool = False  # loops over -r roots
    checks_in_place: bool = True  # in-place result is verified (else `N/A`)
    op_label: str = "none"  # printed redop for collectives that do not reduce

    @property
    def program(self) -> str:
        """nccl-tests binary name (`all_reduce_perf`)."""
        return f"{self.name}_perf"

    @abstractmethod
    def counts(self, count: int, nranks: int, itemsize: int) -> Counts:
        """Counts for a requested element count `count = floor(bytes/itemsize)`."""

    @abstractmethod
    def algbw_bytes(self, counts: Counts, itemsize: int, nranks: int) -> float:
        """Bytes B in algbw = B / time (docs/behaviour.md §3.6)."""

    @abstractmethod
    def bus_bandwidth_factor(self, nranks: int) -> float:
        """busbw = algbw * factor (docs/behaviour.md §3.6, doc/PERFORMANCE.md in nccl-tests)."""

    @abstractmethod
    def launch(self, comm: Communicator, send: int, recv: int, args: CallArgs) -> None:
        """Issue the call for one rank (send/recv are already placement-adjusted)."""

    @abstractmethod
    def input_fills(self, args: CallArgs, seed: int) -> list[Fill]:
        """What this rank's send pointer must hold (relative to it)."""

    @abstractmethod
    def expected_fills(self, args: CallArgs, seed: int, in_place: bool) -> list[Fill]:
        """Expected content of the checked region: `recv_count` elements at the
        recv pointer, relative to it."""

    def in_place_offsets(self, counts: Counts, rank: int) -> tuple[int, int]:
        """In-place placement: (send offset, recv offset) in elements inside the
        receive buffer (docs/behaviour.md §2.8 "IP send/recv offset")."""
        return 0, 0

    def check_nranks(self, nranks: int) -> str | None:
        """A reason this collective cannot run on `nranks`, or None."""
        return None

    def validate(self, min_bytes: int, max_bytes: int, nranks: int) -> None:
        """Refuse a run this collective cannot do (raise BenchError); default: any."""

    def summary_lines(self, args: CallArgs, time_us: float) -> list[str]:
        """Extra `#` lines to print after a measured half-row (default none)."""
        return []

    def uses_buffers(self, counts: Counts, itemsize: int) -> tuple[int, int]:
        """(send bytes, recv bytes) spanned by one call; used for the pointer rotation."""
        return counts.send_count * itemsize, counts.recv_count * itemsize

"""Fakes for runs of the real harness without a GPU: a worker whose buffers are
smaller than -e (what a backend builds when nccl-tests' memory clamp lowers it),
whose communicator fails any call that reaches beyond them, as a GPU would."""

from __future__ import annotations

from typing import Any

from ncclbench.backends.worker import RankSlot, Worker

SEND, RECV = 1 << 44, 1 << 45  # fake device addresses, far apart


class BoundedComm:
    """One rank; every call must stay inside its buffers, as on a GPU."""

    rank, nranks = 0, 1

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.calls: list[int] = []  # element counts of the calls made

    def _inside(self, ptr: int, nbytes: int) -> None:
        base = SEND if ptr < RECV else RECV
        if not (base <= ptr and ptr + nbytes <= base + self.capacity):
            raise AssertionError(f"a call reached beyond its {self.capacity}-byte buffer")

    def compile(self, calls):  # no pre-binding: the harness calls the methods
        return None

    def compile_group(self, items):
        return None

    def all_reduce(self, send, recv, count, dtype, op):
        self._inside(send, count * dtype.itemsize)
        self._inside(recv, count * dtype.itemsize)
        self.calls.append(count)


class SmallBuffersWorker(Worker):
    """A worker whose buffers hold `capacity` bytes: what the NCCL backend
    builds when nccl-tests' memory clamp lowers -e."""

    backend_name = "fake"

    def __init__(self, capacity: int, reason: str | None = None):
        self.comm = BoundedComm(capacity)
        self.slots = [RankSlot(0, self.comm, SEND, RECV)]  # type: ignore[arg-type]
        self.nranks, self.max_bytes = 1, capacity
        self.reason = reason

    is_reporter = True  # type: ignore[assignment]

    def wait(self) -> None:
        pass

    def barrier(self) -> None:
        pass

    def allreduce_host(self, value: float, op: str) -> float:
        return value

    def gather_host(self, obj: Any) -> list[Any] | None:
        return [obj]

    def zero(self, slot, ptr, nbytes):
        raise AssertionError("not checked (-c 0)")

    def fill(self, slot, ptr, fills, dtype, op):
        raise AssertionError("not checked (-c 0)")

    def count_wrong(self, slot, ptr, count, fills, dtype, op):
        raise AssertionError("not checked (-c 0)")

    def unsupported_reason(self, coll, dtype, op):
        return self.reason if dtype.name == "half" else None


class Rows:
    def __init__(self):
        self.rows: list[Any] = []

    def begin(self, info, opts):
        pass

    def message(self, line):
        pass

    def row(self, row):
        self.rows.append(row)

    def end(self, summary):
        pass

    def close(self):
        pass



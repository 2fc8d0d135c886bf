"""What one health group measures, whatever runs it: all_reduce at a bandwidth
size and a latency size, `cycles` timed cycles each, through the harness's own
loop (`harness.timing.measure`: nccl-tests' TimeTest, bit-exact check on).

Shared by the CPU runtime (`mpi_group`: a Worker on an MPI communicator) and
the GPU runtime (`nccl_group`: a Worker on an NCCL communicator), so both
report the same numbers the same way and neither has a timing loop of its own.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from ..backends.base import Worker
from ..collectives import lookup
from ..config import Backend, BenchOptions
from ..datatypes import DATATYPE_BY_NAME, REDOP_BY_NAME
from ..harness.timing import Placement, measure, warm_up

# The bandwidth size: where a GPU's or a link's figure repeats.  One H100 alone, 6 scans each
# (bench/results/health-gpu-h100-2026-11-24.md): 4 MiB 539-833 GB/s (41 % max-min, L2 and launch
# bound), 64 MiB 2.2 %, 256 MiB 0.2 %; the judge's floor and the simulator assume the >= 64 MiB
# spread.  The CPU backend keeps 4 MiB: MPI over shared cores and TCP, where larger sizes only
# lengthen the scan.
BW_SIZE = {Backend.NCCL: "256M", Backend.MPI: "4M"}


def default_bw_bytes(backend: Backend) -> int:
    """The bandwidth size a scan on `backend` uses when --bw-size does not say (BW_SIZE)."""
    from ..options import parse_size

    return parse_size(BW_SIZE[backend], "--bw-size")


class GroupTimeout(Exception):
    """A member did not finish its part before the round's deadline."""


@dataclass(frozen=True)
class GroupSpec:
    bw_bytes: int = 4 << 20
    lat_bytes: int = 8
    iters: int = 20
    warmup: int = 5
    cycles: int = 3
    check: int = 1

    @property
    def max_bytes(self) -> int:
        """Bytes per buffer a group's worker needs (at least one float's worth of slack)."""
        return max(self.bw_bytes, self.lat_bytes, 64)

    def with_default_bw(self, backend: Backend) -> GroupSpec:
        """This spec at `backend`'s default bandwidth size (BW_SIZE): for a coordinator that
        learns the ranks' backend only when they join (--serve without --bw-size)."""
        return dataclasses.replace(self, bw_bytes=default_bw_bytes(backend))

    def options(self, timeout_s: int = 0) -> BenchOptions:
        """The harness options of one timed cycle; `timeout_s`: -T (0 = none)."""
        return BenchOptions(iters=self.iters, warmup_iters=self.warmup, check=self.check, timeout=timeout_s)


def measure_sizes(worker: Worker, spec: GroupSpec,
                  options: Callable[[], BenchOptions] | None = None) -> dict:
    """This rank's figures for its group: {"bw_us", "lat_us"} (median cycle), the cycles
    themselves, the algbw byte counts, "nranks" and "wrong" (the bit-exact check's worst
    count over the group).  `options()` gives each cycle's harness options (a runtime
    that shrinks -T as the round's deadline nears); default `spec.options()`."""
    coll = lookup("all_reduce")
    assert coll is not None
    dtype, op = DATATYPE_BY_NAME["float"], REDOP_BY_NAME["sum"]
    opts_for = options or spec.options
    out: dict[str, float | int | list[float]] = {}
    wrong = 0
    for key, nbytes in (("bw_us", spec.bw_bytes), ("lat_us", spec.lat_bytes)):
        elt = dtype.itemsize
        counts = coll.counts(nbytes // elt, worker.nranks, elt)
        placement = Placement(worker, coll, dtype, op, 0, counts, False)
        warm_up(worker, placement, spec.warmup)
        times = []
        for _ in range(max(1, spec.cycles)):
            m, wrong_world = measure(worker, placement, opts_for())
            times.append(m.time_us)
            wrong = max(wrong, int(wrong_world))
        out[key] = statistics.median(times)
        out[key.replace("_us", "_cycles_us")] = times
        out[key.replace("_us", "_bytes")] = coll.algbw_bytes(counts, elt, worker.nranks)
    out["nranks"] = worker.nranks
    out["wrong"] = wrong
    return out

"""A health group whose GPU set-up fails half way (out of device memory on the
second buffer) gives back what it made - the first buffer and the stream -
through the NCCL backend's public `release_memory`, as the benchmark's own
set-up does (before: the buffers only, through a private helper of the
backend, and the stream stayed).  On the simulated CUDA/NCCL of
health_fake_nccl.py, no GPU needed."""

from __future__ import annotations

import time

import pytest
from health_fake_nccl import FakeNccl, gpu_rank_opener

from ncclbench.health.runtime.group_measure import GroupSpec
from ncclbench.health.runtime.nccl_group import GroupNcclHost
from ncclbench.nccl.binding import NcclError


def test_a_failed_group_set_up_frees_its_buffers_and_its_stream():
    lib = FakeNccl()
    cuda = lib.cuda
    made: list[int] = []
    destroyed: list[int] = []
    create, malloc = cuda.stream_create, cuda.malloc

    def stream_create(nonblocking: bool = True) -> int:
        made.append(create(nonblocking))
        return made[-1]

    allocs = []

    def mem_alloc(nbytes: int) -> int:
        if allocs:
            raise NcclError("ncclMemAlloc", 1, "unhandled cuda error", "out of device memory (simulated)")
        allocs.append(malloc(nbytes))
        return allocs[-1]

    cuda.stream_create = stream_create
    cuda.stream_destroy = destroyed.append
    lib.mem_alloc = mem_alloc
    gpu = gpu_rank_opener(lib)(0, "h0")
    gpu.choose_device(0)
    deadline = time.monotonic() + 5
    with pytest.raises(NcclError, match="out of device memory"):
        gpu.build_worker(1, 2, 0, GroupSpec(bw_bytes=1 << 10), deadline, GroupNcclHost(lib, cuda, 0, 2, deadline))
    assert len(allocs) == 1 and allocs[0] not in cuda._mem  # the first buffer was freed
    assert made and destroyed == made  # and the stream destroyed

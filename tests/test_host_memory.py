"""The CPU backend checks host memory before allocating and lowers -e as nccl-tests
does on a GPU ("# Reducing maxBytes to N due to memory limitation"): per host,
all ranks together, MemAvailable and the memory cgroup's limit."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from ncclbench.backends.host_memory import HEADROOM_MIN, MemoryRoom, bytes_per_rank, cgroup_room, largest_fitting, mem_available

GiB = 1 << 30


def test_mem_available_from_meminfo():
    text = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   22000000 kB\n"
    assert mem_available(text) == 22000000 * 1024
    assert mem_available("MemTotal: 1 kB\n") is None


def _write(d: Path, **files: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name.replace("_", ".", 1)).write_text(text)


def test_cgroup_v1_tightest_limit_on_the_way_up(tmp_path):
    mem = tmp_path / "memory"
    _write(mem, memory_limit_in_bytes=str(1 << 63 - 1), memory_usage_in_bytes="5000")
    _write(mem / "job", memory_limit_in_bytes=str(8 * GiB), memory_usage_in_bytes=str(1 * GiB))
    _write(mem / "job" / "step", memory_limit_in_bytes=str(4 * GiB), memory_usage_in_bytes=str(3 * GiB),
           memory_stat="cache 10\ntotal_inactive_file 536870912\n")
    room = cgroup_room("4:memory:/job/step\n3:cpu:/\n", tmp_path)
    assert room == ("/job/step", 1 * GiB + 512 * (1 << 20))  # 4 - 3 GiB, plus reclaimable cache
    _write(mem / "job", memory_limit_in_bytes=str(3 * GiB), memory_usage_in_bytes=str(2900 * (1 << 20)))
    assert cgroup_room("4:memory:/job/step\n", tmp_path)[0] == "/job"  # the parent is tighter now


def test_cgroup_v2_and_no_limit(tmp_path):
    _write(tmp_path / "slice", memory_max="2147483648\n", memory_current="1073741824\n",
           memory_stat="anon 1\ninactive_file 0\n")
    assert cgroup_room("0::/slice\n", tmp_path) == ("/slice", GiB)
    _write(tmp_path / "free", memory_max="max\n", memory_current="5\n")
    assert cgroup_room("0::/free\n", tmp_path) is None
    assert cgroup_room("", tmp_path) is None


def test_largest_fitting_counts_every_rank_of_a_host_together():
    rooms = [MemoryRoom("a", 40 * GiB), MemoryRoom("a", 40 * GiB), MemoryRoom("b", 40 * GiB)]
    limit, why = largest_fitting(rooms, nranks=3, unalign=0)
    assert why.startswith("host a: MemAvailable") and "2 ranks" in why
    share = 20 * GiB
    usable = share - max(share // 10, HEADROOM_MIN)
    assert bytes_per_rank(limit, 3, 0) <= usable < bytes_per_rank(limit + 4096, 3, 0)
    # a cgroup shared by two ranks of host b is the tighter limit
    rooms = [MemoryRoom("b", 40 * GiB, "/job", 3 * GiB), MemoryRoom("b", 40 * GiB, "/job", 3 * GiB)]
    limit2, why2 = largest_fitting(rooms, nranks=2, unalign=0)
    assert "memory cgroup /job" in why2 and 2 * bytes_per_rank(limit2, 2, 0) <= 3 * GiB
    assert largest_fitting([MemoryRoom("x", None)], 2, 0) is None


CGROUP_V1 = Path("/sys/fs/cgroup/memory")


@pytest.mark.mpi
def test_a_size_beyond_the_memory_limit_is_lowered_like_nccl_tests(tmp_path):
    """-b 64G -e 64G in a memory cgroup of 768 MiB: the run measures the largest
    size that fits for both ranks, prints nccl-tests' line, and exits 0 (no
    numpy MemoryError, no OOM killer)."""
    if os.geteuid() != 0 or not (CGROUP_V1 / "cgroup.procs").exists():
        pytest.skip("needs root and a cgroup v1 memory hierarchy at /sys/fs/cgroup/memory to make a limit")
    cg = CGROUP_V1 / f"ncclbench-test-{os.getpid()}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(768 << 20))
        from launch_helpers import PY, child_env

        cmd = [PY, "-m", "ncclbench", "all_reduce_perf", "-b", "64G", "-e", "64G", "-n", "1", "-w", "0", "-c", "1",
               "--backend", "mpi", "--nprocs", "2", "--no-store"]
        run = subprocess.run(["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", *cmd],
                             env=child_env(), capture_output=True, text=True, timeout=180)
    finally:
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                import time

                time.sleep(0.1)
    assert run.returncode == 0, run.stdout + run.stderr
    m = re.search(r"^# Reducing maxBytes to (\d+) due to memory limitation$", run.stdout, re.M)
    assert m, run.stdout
    reduced = int(m.group(1))
    assert 0 < reduced and 2 * bytes_per_rank(reduced, 2, 0) <= 768 << 20
    rows = [line.split() for line in run.stdout.splitlines() if re.match(r"^\s+\d+\s+\d+\s+float", line)]
    assert len(rows) == 1 and int(rows[0][0]) <= reduced and rows[0][8] == "0", run.stdout  # checked, 0 wrong
    assert "memory cgroup" in run.stdout and "Traceback" not in run.stderr


def test_fill_cache_budget_is_what_the_room_holds_beyond_the_buffers():
    from ncclbench.backends.host_memory import ALIGN, fill_cache_budget

    GiB, MiB = 1 << 30, 1 << 20
    want = 3 * (64 * MiB + ALIGN)  # the sweep's three streams at -e 64M
    plenty = [MemoryRoom("a", 64 * GiB), MemoryRoom("a", 64 * GiB)]
    assert fill_cache_budget(plenty, 64 * MiB, 2, 0) == want
    assert fill_cache_budget([MemoryRoom("a", None)], 64 * MiB, 1, 0) == want  # nothing known: as -e itself
    tight = [MemoryRoom("a", 1 * GiB)] * 4  # 256 MiB per rank: buffers ~200 MiB, less the headroom
    budget = fill_cache_budget(tight, 64 * MiB, 4, 0)
    assert 0 <= budget < want
    assert budget + bytes_per_rank(64 * MiB, 4, 0) <= GiB // 4
    assert fill_cache_budget([MemoryRoom("a", 300 * MiB)] * 4, 64 * MiB, 4, 0) == 0  # no room: no cache

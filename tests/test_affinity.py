"""--cpu-bind numa|core: the kernel's CPU lists read and the process (or its launching thread) really bound."""

from __future__ import annotations

import os
import threading

import pytest

from ncclbench.core.errors import ArgumentError
from ncclbench.launch.affinity import bind_thread_to_core, bind_to_gpu, core_for_rank, format_cpus, gpu_local_cpus, parse_cpulist
from ncclbench.run.bench_args import parse_bench_args


def fake_sysfs(tmp_path, bdf: str, text: str) -> str:
    d = tmp_path / "bus/pci/devices" / bdf
    d.mkdir(parents=True)
    (d / "local_cpulist").write_text(text)
    return str(tmp_path)


def test_cpulist_round_trip():
    assert parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert format_cpus({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert parse_cpulist("") == set()
    with pytest.raises(ValueError):
        parse_cpulist("5-2")


def test_local_cpus_of_a_gpu(tmp_path):
    root = fake_sysfs(tmp_path, "0000:19:00.0", "0-7,64-71")
    assert gpu_local_cpus(0, 0x19, 0, root) == set(range(8)) | set(range(64, 72))
    assert gpu_local_cpus(0, 0x1a, 0, root) is None  # no such device


def test_binding_really_changes_the_affinity_and_is_undone(tmp_path):
    allowed = os.sched_getaffinity(0)
    one = min(allowed)
    root = fake_sysfs(tmp_path, "0000:06:00.0", str(one))
    try:
        note = bind_to_gpu(0, 6, 0, root)
        assert os.sched_getaffinity(0) == {one}
        assert note == f"bound to CPUs {one} (local to GPU 0000:06:00; --cpu-bind numa)"
    finally:
        os.sched_setaffinity(0, allowed)


def test_nothing_bound_when_the_kernel_does_not_say_or_no_local_cpu_is_allowed(tmp_path):
    allowed = os.sched_getaffinity(0)
    assert "not bound" in bind_to_gpu(0, 6, 0, str(tmp_path))
    root = fake_sysfs(tmp_path, "0000:07:00.0", str(max(allowed) + 1000))
    assert "is allowed here" in bind_to_gpu(0, 7, 0, root)
    assert os.sched_getaffinity(0) == allowed


def test_option_parsing():
    assert parse_bench_args("all_reduce_perf", []).cpu_bind == "none"
    assert parse_bench_args("all_reduce_perf", ["--cpu-bind", "numa"]).cpu_bind == "numa"
    with pytest.raises(ArgumentError, match="--cpu-bind"):
        parse_bench_args("all_reduce_perf", ["--cpu-bind=socket"])


def test_core_for_rank_counts_from_the_top_one_core_per_local_rank():
    cpus = {0, 1, 2, 3, 8, 9}
    picked = [core_for_rank(cpus, r) for r in range(6)]
    assert picked == [9, 8, 3, 2, 1, 0]
    assert core_for_rank(cpus, 6) == 9  # past the set: reused, never out of it
    assert core_for_rank({5}, 3) == 5


def test_core_binding_binds_the_calling_thread_only():
    """Linux affinity is per thread: NCCL's threads, started before, must keep their set."""
    allowed = os.sched_getaffinity(0)
    seen: dict[str, object] = {}

    def bind() -> None:
        seen["note"] = bind_thread_to_core(0)
        seen["inside"] = os.sched_getaffinity(0)

    t = threading.Thread(target=bind)
    t.start()
    t.join()
    assert seen["inside"] == {max(allowed)}
    assert seen["note"] == f"launching thread bound to CPU {max(allowed)} (local rank 0; --cpu-bind core)"
    assert os.sched_getaffinity(0) == allowed


def test_core_option_parses():
    assert parse_bench_args("all_reduce_perf", ["--cpu-bind", "core"]).cpu_bind == "core"

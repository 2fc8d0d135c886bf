"""nccl-tests' memory clamp end to end on GPU 0 (issue 12): `-e` above what the
buffers can hold is lowered (`# Reducing maxBytes to N due to memory
limitation`) and the sweep stops at the lowered value, exit 0.  On an 80 GB
card this is the issue's `-b 16G -e 64G -f 2`: 16 GiB runs, 32 GiB does not.

With NCCL_TESTS_BUILD=<dir with all_reduce_perf> the rows are also compared
with what that nccl-tests build prints for the same command line."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from ncclbench.backends.select import gpu_count
from ncclbench.nccl import runmodel

pytestmark = pytest.mark.gpu

ROW = re.compile(r"^\s+(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(-?\d+)\s")
REDUCING = re.compile(r"^# Reducing maxBytes to (\d+) due to memory limitation", re.M)


def rows(text: str) -> list[tuple[str, ...]]:
    """(size, count, type, redop, root) of every result row."""
    return [m.groups() for m in map(ROW.match, text.splitlines()) if m]


def command_line() -> tuple[list[str], int, int]:
    """The clamp command line for GPU 0: -b the largest power of two that fits
    (16 GiB on an 80 GB card), -e four times that; and the expected limit."""
    from ncclbench.cuda.runtime import get_runtime

    total = get_runtime().properties(0).total_mem
    limit = runmodel.nccl_tests_max_bytes(total, True)
    first = 1 << (limit.bit_length() - 1)
    return ["-b", str(first), "-e", str(4 * first), "-f", "2", "-n", "5", "-w", "1"], first, limit


def test_max_bytes_above_memory_runs_the_clamped_sweep_and_exits_0():
    if gpu_count() < 1:
        pytest.skip("needs a GPU")
    args, first, limit = command_line()
    env = dict(os.environ, NCCL_TESTS_DEVICE="0", NCCLBENCH_NO_STORE="1", CUDA_VISIBLE_DEVICES="0")
    p = subprocess.run([sys.executable, "-m", "ncclbench", "all_reduce_perf", *args], capture_output=True,
                       text=True, env=env, timeout=300)
    print(p.stdout)
    assert p.returncode == 0, p.stdout + p.stderr
    assert [int(v) for v in REDUCING.findall(p.stdout)] == [limit]
    got = rows(p.stdout)
    assert [int(r[0]) for r in got] == [first]  # 2*first > limit is not run
    assert int(got[-1][0]) <= limit
    assert "# Out of bounds values : 0 OK" in p.stdout

    build = os.environ.get("NCCL_TESTS_BUILD")
    if build:
        ref = subprocess.run([os.path.join(build, "all_reduce_perf"), *args], capture_output=True, text=True,
                             env=env, timeout=300)
        print(ref.stdout)
        assert ref.returncode == 0, ref.stdout + ref.stderr
        assert REDUCING.findall(ref.stdout) == REDUCING.findall(p.stdout)
        assert rows(ref.stdout) == got

"""The run plan: nccl-tests' memory clamp shared by the sweep and the buffers,
the loops it lists, the pairs it skips, and runs of the real harness on a
worker whose buffers are smaller than -e (a GPU whose memory clamps it)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from ncclbench.backends.worker import Worker
from ncclbench.collectives import COLLECTIVES
from ncclbench.core.config import Backend
from ncclbench.core.datatypes import DATATYPE_BY_NAME
from ncclbench.core.errors import BenchError, ExitCode
from ncclbench.output.text import row_line
from ncclbench.run.bench_args import parse_bench_args
from ncclbench.run.plan import clamp_sizes, make_plan
from ncclbench.run.plan_runner import run_workers

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plan_helpers import Rows, SmallBuffersWorker  # noqa: E402

GiB = 1 << 30
H100_LIMIT = 26549594794  # nccl-tests' "Reducing maxBytes to" on an 80 GB H100 with -c 1
def plan_for(args: list[str], worker: Worker, collective: str = "all_reduce"):
    opts = parse_bench_args(f"{collective}_perf", args)
    return make_plan(opts, COLLECTIVES[collective], Backend.NCCL, worker)


def run(args: list[str], capacity: int):
    worker = SmallBuffersWorker(capacity)
    plan = plan_for(args, worker)
    out = Rows()
    summary = run_workers(plan, [worker], out)
    return plan, out.rows, summary, worker.comm


# -- the clamp ----------------------------------------------------------------------------------

def test_clamp_lowers_max_and_min_as_nccl_tests():
    opts = parse_bench_args("all_reduce_perf", ["-b", "16G", "-e", "64G", "-f", "2"])
    sizes = clamp_sizes(opts, H100_LIMIT)
    assert (sizes.min_bytes, sizes.max_bytes, sizes.requested_max_bytes) == (16 * GiB, H100_LIMIT, 64 * GiB)
    assert sizes.reduced_max_bytes == H100_LIMIT and list(sizes.sweep()) == [16 * GiB]
    both = clamp_sizes(parse_bench_args("all_reduce_perf", ["-b", "32G", "-e", "64G"]), H100_LIMIT)
    assert (both.min_bytes, both.max_bytes) == (H100_LIMIT, H100_LIMIT)
    fits = clamp_sizes(opts, 64 * GiB)
    assert fits.reduced_max_bytes is None and list(fits.sweep()) == [16 * GiB, 32 * GiB, 64 * GiB]


def test_no_room_at_all_is_one_clear_error():
    with pytest.raises(BenchError) as e:
        clamp_sizes(parse_bench_args("all_reduce_perf", ["-b", "8", "-e", "64"]), 0)
    assert e.value.code == ExitCode.CUDA_ERROR and e.value.all_ranks


def test_16g_to_64g_on_clamped_buffers_runs_16g_only():
    """The issue's run (`-b 16G -e 64G -f 2` on an 80 GB card): nccl-tests lowers
    maxBytes to 26549594794 and runs 16 GiB only.  The harness must sweep the
    clamped range: a 32 GiB call would not fit the buffers (here: an assertion
    in the fake communicator; on the GPU: 'invalid argument', exit 3)."""
    plan, rows, summary, comm = run(["-b", "16G", "-e", "64G", "-f", "2", "-c", "0", "-n", "1", "-w", "1"],
                                    H100_LIMIT)
    assert [r.size for r in rows] == [16 * GiB]
    assert max(comm.calls) * 4 == 16 * GiB  # warm-up included: nothing beyond the clamp
    assert plan.sizes.reduced_max_bytes == H100_LIMIT
    assert summary.out_of_bounds == 0


def test_min_above_the_clamp_runs_the_clamped_size():
    _, rows, _, _ = run(["-b", "32G", "-e", "64G", "-c", "0", "-n", "1", "-w", "0"], H100_LIMIT)
    assert [r.size for r in rows] == [H100_LIMIT // 4 * 4]  # float elements of the clamped size


def test_rows_match_the_plan_on_a_small_clamp():
    plan, rows, _, _ = run(["-b", "8", "-e", "1M", "-f", "4", "-c", "0", "-n", "2", "-N", "2"], 5000)
    assert list(plan.sizes.sweep()) == [8, 32, 128, 512, 2048]
    assert [r.size for r in rows] == [8, 32, 128, 512, 2048] * 2
    assert plan.expected_rows() == len(rows)


# -- -n 0 -------------------------------------------------------------------------------------

def test_zero_iterations_measure_nothing_and_print_inf_like_nccl_tests():
    """nccl-tests divides the elapsed time by 0 iterations: time `inf`, bandwidths
    0, exit 0.  ncclbench used to end in an IndexError here."""
    _, rows, summary, comm = run(["-b", "8", "-e", "32", "-f", "2", "-c", "0", "-n", "0", "-w", "0"], 1 << 20)
    assert [r.size for r in rows] == [8, 16, 32]
    for r in rows:
        for half in (r.out_of_place, r.in_place):
            assert math.isinf(half.time_us) and half.algbw == 0 and half.busbw == 0
    assert len(comm.calls) == 6  # the untimed op 0 of every half-row still runs, as in nccl-tests
    assert summary.avg_busbw == 0
    line = row_line(rows[0], parse_bench_args("all_reduce_perf", ["-n", "0"]))
    assert "    inf    0.00    0.00" in line


# -- the loops ----------------------------------------------------------------------------------

def test_tests_follow_nccl_tests_order_and_skip_unsupported_pairs():
    worker = SmallBuffersWorker(1 << 20, reason="half cannot")
    plan = plan_for(["-b", "8", "-e", "8", "-d", "all", "-o", "all"], worker)
    names = [(d.name, o.name, r) for d, o, r in plan.tests()]
    assert names[:2] == [("int8", "sum", -1), ("int8", "prod", -1)]
    assert not [n for n in names if n[0] == "half"] and ("half", "sum") in plan.skipped
    assert plan.notes == ("skipping half/sum, half/prod, half/max, half/min, half/avg, half/mulsum: half cannot",)
    assert len(names) == 11 * 6


def test_an_explicit_unsupported_pair_is_refused_with_exit_5():
    with pytest.raises(BenchError) as e:
        plan_for(["-d", "half", "-o", "sum"], SmallBuffersWorker(1 << 20, reason="half cannot"))
    assert e.value.code == ExitCode.NOT_IMPLEMENTED and e.value.message == "half cannot" and e.value.all_ranks


def test_roots_and_ops_of_rooted_and_plain_collectives():
    worker = SmallBuffersWorker(1 << 20)
    worker.nranks = 4
    bcast = plan_for(["-r", "-1"], worker, "broadcast")
    assert bcast.roots == (0, 1, 2, 3) and [o.name for o in bcast.ops] == ["none"]
    assert plan_for(["-r", "2"], worker, "reduce").roots == (2,)
    with pytest.raises(BenchError) as e:
        plan_for(["-r", "4"], worker, "reduce")
    assert e.value.code == ExitCode.ARGUMENT and "0..3" in e.value.message
    assert plan_for(["-r", "3"], worker, "all_reduce").roots == (-1,)
    assert [o.name for o in plan_for([], worker, "hypercube").ops] == [""]


def test_expected_rows_counts_every_loop_and_forever_is_unknown():
    worker = SmallBuffersWorker(1 << 20)
    worker.nranks = 8
    plan = plan_for(["-b", "1K", "-e", "4K", "-f", "2", "-r", "-1", "-N", "2"], worker, "broadcast")
    assert plan.expected_rows() == 3 * 8 * 2
    many = plan_for(["-b", "8", "-e", "64", "-f", "2", "-d", "all", "-o", "max"], SmallBuffersWorker(1 << 20))
    assert many.expected_rows() == 4 * 12
    assert plan_for(["-N", "0"], SmallBuffersWorker(1 << 30)).expected_rows() is None


def test_the_plan_is_frozen():
    import dataclasses

    plan = plan_for([], SmallBuffersWorker(1 << 30))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.sizes = None  # type: ignore[misc,assignment]
    assert plan.datatypes == (DATATYPE_BY_NAME["float"],) and plan.backend is Backend.NCCL

"""Pure parts of the harness: size sweep, warm-up sizes, rotation, statistics,
bandwidth formulas and the per-collective count rules (docs/behaviour.md §2.7-2.9, §3.6-3.7)."""

import math

import pytest

from ncclbench.collectives import COLLECTIVES, lookup
from ncclbench.run.iteration_stats import bandwidths, elementwise_max, per_iter_stats
from ncclbench.run.plan import sweep_sizes, warmup_sizes
from ncclbench.run.timing import rotation_steps


def test_factor_sweep_includes_both_ends():
    assert list(sweep_sizes(8, 128, 1 << 20, 2)) == [8, 16, 32, 64, 128]


def test_additive_sweep_stops_at_largest_step_not_above_max():
    # docs/behaviour.md §2.7: -b 7 -e 100 -i 31 requests 7, 38, 69, 100
    assert list(sweep_sizes(7, 100, 31, 1)) == [7, 38, 69, 100]
    assert list(sweep_sizes(7, 99, 31, 1)) == [7, 38, 69]


def test_factor_sweep_does_not_overshoot():
    assert list(sweep_sizes(3, 100, 1, 4)) == [3, 12, 48]


def test_zero_min_is_refused_instead_of_hanging():
    with pytest.raises(ValueError):
        list(sweep_sizes(0, 8, 1, 2))
    with pytest.raises(ValueError):
        warmup_sizes(0, 8)


def test_warmup_always_doubles_whatever_the_step():
    assert warmup_sizes(1000, 5000) == [1000, 2000, 4000]


@pytest.mark.parametrize("span,maxb,steps", [(0, 100, 1), (10, 100, 10), (33, 100, 3), (200, 100, 1)])
def test_rotation_steps(span, maxb, steps):
    assert rotation_steps(span, maxb) == steps


def test_per_iter_stats_follow_nccl_tests_definitions():
    samples = [100.0, 1.0, 2.0, 3.0, 4.0]
    s = per_iter_stats(samples, skip=1)
    assert (s.min_us, s.max_us) == (1.0, 4.0)
    assert s.avg_us == pytest.approx(2.5)
    assert s.p50_us == 3.0  # upper median: sorted[N//2]
    assert s.p95_us == 4.0 and s.p99_us == 4.0  # nearest rank
    assert s.stdev_us == pytest.approx(math.sqrt(1.25))  # population stdev
    assert s.cv_pct == pytest.approx(math.sqrt(1.25) / 2.5 * 100)
    assert s.times_us == samples  # all samples kept, skipped ones included


def test_per_iter_stats_nearest_rank_on_longer_series():
    s = per_iter_stats([float(i) for i in range(1, 101)], skip=0)
    assert s.p95_us == 95.0 and s.p99_us == 99.0 and s.p50_us == 51.0


def test_elementwise_max():
    assert elementwise_max([[1, 5, 3], [4, 2, 6]]) == [4, 5, 6]


def test_bandwidth_formula_matches_reference_row():
    # nccl-tests' own 4xH200 run: 128 MiB all_reduce on 4 ranks in 612.09 us -> 219.28 / 328.92 GB/s
    coll = lookup("all_reduce")
    counts = coll.counts(134217728 // 4, 4, 4)
    alg, bus = bandwidths(coll.algbw_bytes(counts, 4, 4), 612.09, coll.bus_bandwidth_factor(4))
    assert round(alg, 2) == 219.28 and round(bus, 2) == 328.92


@pytest.mark.parametrize("name,n,factor", [
    ("all_reduce", 4, 1.5), ("all_gather", 4, 0.75), ("reduce_scatter", 8, 0.875),
    ("alltoall", 2, 0.5), ("broadcast", 4, 1.0), ("reduce", 4, 1.0), ("sendrecv", 4, 1.0),
    ("hypercube", 4, 1.0), ("gather", 4, 0.75), ("scatter", 4, 0.75), ("alltoallv", 4, 0.75)])
def test_bus_factors(name, n, factor):
    assert COLLECTIVES[name].bus_bandwidth_factor(n) == pytest.approx(factor)


def test_single_rank_factors_are_zero_where_n_minus_1():
    assert COLLECTIVES["all_reduce"].bus_bandwidth_factor(1) == 0
    assert COLLECTIVES["all_gather"].bus_bandwidth_factor(1) == 0


def test_per_rank_counts_round_down_to_16_bytes():
    # docs/behaviour.md §2.8: 4 ranks, float, 8 bytes -> 0 0 rows; 128 B -> 8 per rank
    ag = COLLECTIVES["all_gather"]
    assert ag.counts(2, 4, 4).param_count == 0
    c = ag.counts(32, 4, 4)
    assert (c.param_count, c.size_bytes(4)) == (8, 128)
    # the additive-sweep example: all_gather on one rank prints 0, 32, 64, 96 for 7, 38, 69, 100
    assert [ag.counts(s // 4, 1, 4).size_bytes(4) for s in (7, 38, 69, 100)] == [0, 32, 64, 96]


def test_printed_size_is_total_buffer():
    c = COLLECTIVES["reduce_scatter"].counts(1 << 18, 4, 4)
    assert c.size_bytes(4) == 1 << 20 and c.param_count == 1 << 16


def test_in_place_offsets():
    ag, rs = COLLECTIVES["all_gather"], COLLECTIVES["reduce_scatter"]
    c = ag.counts(1024, 4, 4)
    assert ag.in_place_offsets(c, 3) == (3 * 256, 0)
    c = rs.counts(1024, 4, 4)
    assert rs.in_place_offsets(c, 2) == (0, 2 * 256)
    assert COLLECTIVES["all_reduce"].in_place_offsets(c, 2) == (0, 0)


def test_alltoallv_pattern_is_balanced_and_16_byte_aligned():
    from ncclbench.collectives.alltoallv import pattern_bytes

    pat = pattern_bytes(4096 * 4, 4, 1.0)
    assert all(b % 16 == 0 for row in pat for b in row)
    assert all(row[i] == 0 for i, row in enumerate(pat))  # spread 1: nothing to self
    totals = {sum(row) for row in pat}
    assert len(totals) == 1  # circulant: every rank sends the same total
    assert pattern_bytes(100, 1, 1.0) == ((96,),)


def test_expected_fills_cover_the_receive_count():
    from ncclbench.collectives.collective import CallArgs
    from ncclbench.core.datatypes import DATATYPE_BY_NAME, NO_OP, REDOP_BY_NAME

    f = DATATYPE_BY_NAME["float"]
    for name, coll in COLLECTIVES.items():
        n = 4
        counts = coll.counts(4096, n, 4)
        op = REDOP_BY_NAME["sum"] if coll.reduces else NO_OP
        for rank in range(n):
            for ip in (False, True):
                args = CallArgs(f, op, 1 if coll.rooted else -1, rank, n, counts)
                fills = coll.expected_fills(args, 5, ip)
                covered = sum(x.count for x in fills)
                assert covered <= counts.recv_count, name
                if name not in ("alltoallv",):
                    assert covered == counts.recv_count, (name, rank, ip)
                ends = sorted((x.offset, x.offset + x.count) for x in fills)
                assert all(a[1] <= b[0] for a, b in zip(ends, ends[1:])), name  # no overlap


def test_lookup_accepts_binary_names():
    assert lookup("all_reduce_perf").name == "all_reduce"
    assert lookup("/opt/bin/alltoall_perf_mpi").name == "alltoall"
    assert lookup("nope") is None

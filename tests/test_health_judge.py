"""health.core.round_judge: robust fleet references, the spread floor, scoring each group."""

import numpy as np
import pytest

from ncclbench.health.core.round_judge import (
    MAD_SE,
    MAD_TO_SIGMA,
    NO_ANSWER,
    OK,
    SLOW,
    UNJUDGED,
    WRONG,
    Baseline,
    Reference,
    References,
    RoundResult,
    RoundShift,
    Thresholds,
    fleet_shift,
    percent_of,
    references,
    robust_reference,
    score,
    thresholds_for,
)


def test_median_and_scaled_mad_ignore_missing_values():
    ref = robust_reference([10.0, 11.0, 12.0, np.nan, 13.0, 14.0], floor=0.0, min_groups=5)
    assert ref.center == 12.0 and ref.n == 5
    assert ref.raw_spread == pytest.approx(MAD_TO_SIGMA * 1.0)
    # few groups: the MAD is uncertain, so the spread is taken one standard error up
    assert ref.spread == pytest.approx(MAD_TO_SIGMA * (1 + MAD_SE / np.sqrt(5)))


def test_a_few_outliers_do_not_move_the_reference():
    values = np.r_[np.linspace(47.5, 48.5, 97), [10.0, 0.5, 30.0]]
    ref = robust_reference(values, floor=0.005)
    assert ref.center == pytest.approx(48.0, abs=0.02)
    assert Thresholds().bw_floor == 0.01
    assert ref.spread < 0.5  # a plain stdev would be ~6 here
    assert ref.z(30.0) < -30


def test_tiny_spread_is_floored_relative_to_the_median():
    ref = robust_reference([100.0] * 9 + [100.01], floor=0.01)
    assert ref.raw_spread == 0.0 and ref.spread == pytest.approx(1.0)
    assert float(ref.z(98.0)) == pytest.approx(-2.0)  # 2 % below is 2 sigma, not infinitely many


def test_too_few_groups_make_no_reference():
    assert robust_reference([1.0, 2.0, 3.0, 4.0], floor=0.0, min_groups=5) is None


def test_score_statuses_and_their_evidence():
    refs = References(robust_reference([48.0] * 10, 0.005), robust_reference([20.0] * 10, 0.05))
    res = RoundResult(np.array([48.1, 43.0, np.nan, 48.0, 48.0, 48.0]), np.array([20.0, 20.0, np.nan, 30.0, 20.0, 20.0]),
                      np.array([0, 0, 0, 0, 12, 0]), {5: "rank 9 (host h3, pid 77) died"})
    sc = score(res, refs, limit_z=3.5)
    assert sc.status == [OK, SLOW, NO_ANSWER, SLOW, WRONG, NO_ANSWER]
    assert "busbw 43 GB/s, z -20.8" in sc.why[1] and "fleet median 48 GB/s" in sc.why[1]
    assert "latency 30 us" in sc.why[3] and "busbw" not in sc.why[3]
    assert sc.why[4] == "12 wrong elements (bit-exact check)"
    assert sc.why[5] == "rank 9 (host h3, pid 77) died"
    assert sc.why[0] == "" and list(sc.bad()) == [False, True, True, True, True, True]
    assert sc.symptom == ["", "bw", "no answer", "lat", "wrong", "no answer"]


def test_without_any_reference_a_group_is_not_judged():
    res = RoundResult(np.array([1.0, 50.0]), np.array([1.0, 1.0]), np.zeros(2, dtype=int))
    sc = score(res, References(None, None), 3.5)
    assert sc.status == [UNJUDGED, UNJUDGED] and "no reference" in sc.why[0]


def test_baseline_stands_in_for_a_small_fleet_and_reveals_a_fleet_wide_drop():
    thr = Thresholds()
    base = Baseline({"pairs:2x1": (48.0, 0.3)}, name="good")
    small = references(np.array([40.0, 40.5]), np.array([20.0, 20.0]), "pairs:2x1", thr, base)
    assert small.busbw.source == "baseline good" and small.busbw.center == 48.0
    big = references(np.full(20, 43.0), np.full(20, 20.0), "pairs:2x1", thr, base)
    assert big.busbw.source == "fleet"
    line = fleet_shift(big, thr, "pairs:2x1")
    assert line is not None and "10.4 % below baseline good" in line
    assert fleet_shift(references(np.full(20, 47.9), np.full(20, 20.0), "pairs:2x1", thr, base), thr, "x") is None


def test_percent_of_expected_only_when_the_ceiling_is_known():
    assert percent_of({"pairs:2x1": 50.0}, "pairs:2x1", 45.0) == pytest.approx(90.0)
    assert percent_of(None, "pairs:2x1", 45.0) is None
    assert percent_of({"intra:1x8": 370.0}, "pairs:2x1", 45.0) is None


def test_a_gross_outlier_is_slow_even_when_few_groups_make_a_wide_spread():
    bw = np.array([86.0, 99.0, 11.6])  # three host pairs, one at 100 Mbit/s among unshaped ones
    refs = References(robust_reference(bw, 0.01, 3), None)
    plain = score(RoundResult(bw, np.full(3, np.nan), np.zeros(3, dtype=int)), refs, 3.5)
    assert plain.status == [OK, OK, OK] and plain.z_bw[2] > -3.5  # the z alone misses it
    sc = score(RoundResult(bw, np.full(3, np.nan), np.zeros(3, dtype=int)), refs, 3.5, gross_fraction=0.5)
    assert sc.status == [OK, OK, SLOW] and "(13 % of it)" in sc.why[2]


def test_the_gross_rule_holds_for_small_fleets_only():
    """From 8 groups the MAD is a usable spread: CI (2026-11-26) had two 29 % figures of a healthy
    host among 13 host pairs on 2 shared cores at z -2.1 and -2.2, convicted by the gross rule."""
    thr = Thresholds()
    healthy = [0.42, 0.74, 0.42, 0.45, 0.25, 0.96, 0.50, 0.53, 0.47, 0.56, 0.76, 0.62, 0.30]
    bw = np.array(healthy + [0.145])
    refs = References(robust_reference(bw, thr.bw_floor, 3), None)
    res = RoundResult(bw, np.full(bw.size, np.nan), np.zeros(bw.size, dtype=int))
    big = score(res, refs, 3.5, thr.gross_fraction, gross_max_groups=thr.gross_max_groups)
    assert big.status[-1] == OK and big.z_bw[-1] > -3.5  # 14 groups: the z decides, and says noise
    small = bw[[0, 3, -1]]
    refs3 = References(robust_reference(small, thr.bw_floor, 3), None)
    sc = score(RoundResult(small, np.full(3, np.nan), np.zeros(3, dtype=int)), refs3, 3.5, thr.gross_fraction,
               gross_max_groups=thr.gross_max_groups)
    assert sc.status[-1] == SLOW  # 3 groups: the gross rule still convicts a third of the median


def test_a_round_shift_scales_the_reference_and_widens_it_by_the_controls_noise():
    ref = References(robust_reference([10.0] * 8, 0.01, 3), robust_reference([5.0] * 8, 0.15, 3))
    shift = RoundShift.from_ratios([0.5, 0.5], [2.0, 2.0], 2)
    assert shift is not None and shift.bw == pytest.approx(0.5) and shift.lat == pytest.approx(2.0)
    scaled = shift.apply(ref)
    assert scaled.busbw.center == pytest.approx(5.0) and scaled.lat_us.center == pytest.approx(10.0)
    assert scaled.busbw.spread == pytest.approx(ref.busbw.spread * 0.5 * np.sqrt(1.5))
    assert "control(s) ran at 0.50x" in scaled.busbw.source
    # a group at half the fleet figure in a round whose controls ran at half: ok; at a quarter: slow
    res = RoundResult(np.array([5.0, 2.5]), np.array([10.0, 10.0]), np.zeros(2, dtype=int))
    assert score(res, scaled, 3.5).status == [OK, SLOW]
    # no latency figure from the controls: latency not judged in that round
    assert RoundShift.from_ratios([0.5], [], 1).apply(ref).lat_us is None
    assert RoundShift.from_ratios([], [], 0) is None


def test_a_round_that_did_not_move_is_judged_as_the_fleet_round_was():
    """Controls within their own noise of 1 leave the reference as it was, unwidened: widening every
    later round for the controls' noise cost the simulated 16-host fleet a tenth of its -10 % NVLink
    faults (a fault at z -3.7 read -3.1)."""
    ref = References(Reference(362.5, 9.1, 16, "fleet"), None)
    still = RoundShift.from_ratios([0.998, 1.003], [], 2)
    kept = still.apply(ref).busbw
    assert (kept.center, kept.spread) == (362.5, 9.1) and "within their noise, not rescaled" in kept.source
    res = RoundResult(np.array([327.7]), np.array([np.nan]), np.zeros(1, dtype=int))
    assert score(res, still.apply(ref), 3.5).status == [SLOW]  # z -3.8: confirmed
    moved = RoundShift.from_ratios([0.9, 0.92], [], 2).apply(ref).busbw  # 9 % on a 2.5 % spread: moved
    assert moved.center == pytest.approx(362.5 * np.sqrt(0.9 * 0.92))


def test_the_cpu_backend_has_its_own_noise_floors():
    gpu, cpu = thresholds_for(True), thresholds_for(False, judge_latency=False)
    assert gpu == Thresholds()
    assert cpu.bw_floor > gpu.bw_floor and cpu.lat_floor > gpu.lat_floor and not cpu.judge_latency
    # a local-phase dip of the kind 5 % of healthy CPU figures show (-23 %) is not -3.5 sigma there
    bw = np.array([23.4, 23.7, 23.2, 23.5, 18.0])
    for thr, status in ((gpu, SLOW), (cpu, OK)):
        refs = References(robust_reference(bw, thr.bw_floor, 3), None)
        assert score(RoundResult(bw, np.full(5, np.nan), np.zeros(5, dtype=int)), refs, 3.5).status[-1] == status


def test_a_fleet_that_scatters_too_much_is_not_judged_and_says_so():
    thr = Thresholds()
    lat = np.array([23.0, 1487.0, 1577.0, 30.0])  # 8-byte latencies of identical shaped pairs, loaded host
    bw = np.array([0.045, 0.044, 0.046, 0.045])
    refs = references(bw, lat, "pairs:2x1", thr)
    assert refs.busbw is not None and refs.lat_us is None
    assert len(refs.notes) == 1 and "pairs:2x1: latency not judged" in refs.notes[0]
    sc = score(RoundResult(bw, lat, np.zeros(4, dtype=int)), refs, 3.5, 0.5)
    assert sc.status == [OK, OK, OK, OK]  # no latency verdict without a latency reference


def test_a_small_fleets_others_give_their_level_and_the_recorded_floor_their_noise():
    """Two others 2.6 % apart: their MAD one standard error up is a 3.5 % spread (1 degree of
    freedom); the floor's is 1 % x sqrt(1 + 1/2).  Two others 6 % apart disagree beyond the floor
    (3.5 x 1 % x sqrt(2)): their own spread stays.  A later round rescales a floor reference by its
    controls even when they did not move beyond their noise (its center is the fleet round's)."""
    from ncclbench.health.core.round_judge import FloorNoiseReference, floor_noise_reference

    others = [357.6, 367.1]
    own = robust_reference(others, 0.01, 2)
    assert own.spread / own.center == pytest.approx(0.035, abs=0.001)
    ref = floor_noise_reference(own, others, 0.01, 3.5)
    assert isinstance(ref, FloorNoiseReference) and ref.center == own.center
    assert ref.spread == pytest.approx(0.01 * own.center * np.sqrt(1.5))
    apart = [352.0, 374.0]
    assert floor_noise_reference(robust_reference(apart, 0.01, 2), apart, 0.01, 3.5) == \
        robust_reference(apart, 0.01, 2)
    still = RoundShift.from_ratios([0.995, 0.99], [], 2)
    assert still.apply(References(ref, None)).busbw.center == pytest.approx(ref.center * np.sqrt(0.995 * 0.99))
    assert "not rescaled" in still.apply(References(own, None)).busbw.source


def test_the_floor_test_is_a_chi_square_scaled_for_the_number_of_figures():
    """The bound is the chi-square quantile at 2 Phi(-3.5): limit_z ** 2 for two figures (the former
    two-figure bound, 3.5 x sqrt(2) floors apart), -2 ln p for three (chi-square of 2 degrees of
    freedom is exponential), and per degree of freedom it falls toward 1 (Wilson-Hilferty at 1022)."""
    from statistics import NormalDist

    from ncclbench.health.core.round_judge import chi2_bound

    p = 2 * NormalDist().cdf(-3.5)
    assert chi2_bound(1, 3.5) == 3.5 ** 2
    assert chi2_bound(2, 3.5) == pytest.approx(-2 * np.log(p), rel=1e-6)
    z, df = NormalDist().inv_cdf(1 - p), 1022
    assert chi2_bound(df, 3.5) == pytest.approx(df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3, rel=1e-3)
    assert [round(chi2_bound(d, 3.5) / d, 2) for d in (6, 15, 62, 254)] == [4.05, 2.66, 1.7, 1.32]


def _normal_figures(n, rel_sigma, center=365.0):
    """n figures spread like normal noise of rel_sigma (their quantiles, no random draw)."""
    from statistics import NormalDist

    return [center * (1 + rel_sigma * NormalDist().inv_cdf((i + 0.5) / n)) for i in range(n)]


def test_many_figures_at_the_floors_noise_get_the_floor_and_noisier_ones_their_own_spread():
    """The test scales with n: 15 figures at the floor's noise span 3.7 floors and 63 span 4.8
    (their range, which a bound fixed at two figures' 4.95 calls "scattered" in 3.5 % and 31 % of
    such fleets) - both get the floor.  255 figures at 1.2 % (the simulated noise, 1.2x the floor)
    have a variance of 1.44 floors, beyond the bound of 1.32: many figures tell their noise, and
    their own spread (then well determined) stays.  So do 7 figures at 2.5 % (a noisy small fleet)."""
    from ncclbench.health.core.round_judge import FloorNoiseReference, floor_noise_reference

    for n in (15, 63):
        v = _normal_figures(n, 0.01)
        ref = floor_noise_reference(robust_reference(v, 0.01, 2), v, 0.01, 3.5)
        assert isinstance(ref, FloorNoiseReference), n
        assert ref.spread == pytest.approx(0.01 * ref.center * np.sqrt(1 + 1 / n))
    for n, rel in ((255, 0.012), (7, 0.025)):
        v = _normal_figures(n, rel)
        own = robust_reference(v, 0.01, 2)
        assert floor_noise_reference(own, v, 0.01, 3.5) == own, n

"""Judging tune measurements: a gain is claimed only beyond the noise measured in the job."""

import pytest

from ncclbench.tune.judge import Series, bands, judge_size, paired_wins, plugin_ranges


def S(*t):
    return Series(tuple(t))


def test_clear_gain_is_claimed():
    v = judge_size(1024, {"default": S(10, 10.2, 9.9), "ring": S(5, 5.1, 5.05)})
    assert v.best == "ring" and v.claimed and v.winner == "ring"
    assert v.gain == pytest.approx(10 / 5.05 - 1)
    assert v.wins == 3 and v.rounds == 3


def test_gain_inside_the_spread_is_not_claimed():
    # 5 % faster by median, but the default alone varies 30 % round to round
    v = judge_size(8, {"default": S(10, 13, 10.5), "tree": S(10, 9.9, 10.1)})
    assert v.best == "tree"
    assert v.gain < v.noise and not v.claimed and v.winner == "default"


def test_paired_wins_count_rounds_not_medians():
    d, c = S(10.0, 10.0, 20.0), S(10.5, 10.5, 1.0)
    assert paired_wins(d.times_us, c.times_us) == 1
    v = judge_size(8, {"default": S(10, 11, 12), "x": S(9, 10.5, 8)})
    assert v.wins == 3 and v.rounds == 3


def test_default_fastest():
    v = judge_size(8, {"default": S(5, 5), "x": S(6, 6)})
    assert v.best == "default" and v.gain == 0 and not v.claimed


def test_one_round_has_no_noise_measured():
    assert S(3.0).spread == 0.0


def test_missing_default_is_an_error():
    with pytest.raises(ValueError):
        judge_size(8, {"x": S(1)})


def test_bands_group_consecutive_winners_and_ranges_tile():
    vs = [judge_size(s, {"default": S(10, 10), "a": S(a, a), "b": S(b, b)})
          for s, a, b in [(8, 5, 9), (16, 5, 9), (32, 9, 5), (64, 11, 12), (128, 5, 9)]]
    bl = bands(vs)
    assert [(b.winner, b.sizes) for b in bl] == [("a", [8, 16]), ("b", [32]), ("default", [64]), ("a", [128])]
    assert plugin_ranges(bl) == [(8, 31), (32, 63), (64, 127), (128, 128)]
    assert bl[0].median_gain == pytest.approx(1.0)
    assert bl[2].gains == [0.0]

"""The interleaved measurement order of `ncclbench tune`."""

from collections import Counter

import pytest

from ncclbench.tune.round_order import default_rounds, interleaved, iterations_per_round, round_order


def test_every_round_measures_every_candidate_once_default_included():
    steps = list(interleaved([8, 1024], 4, 5))
    assert len(steps) == 2 * 5 * 4
    per_round = Counter((s.size, s.round) for s in steps)
    assert set(per_round.values()) == {4}
    for size in (8, 1024):
        for r in range(5):
            got = [s.candidate for s in steps if s.size == size and s.round == r]
            assert sorted(got) == [0, 1, 2, 3]


def test_rounds_rotate_so_no_candidate_is_always_first():
    firsts = [round_order(3, r)[0] for r in range(3)]
    assert firsts == [0, 1, 2]
    # A/B/A/B: with two candidates the order alternates default-first / candidate-first
    assert [round_order(2, r) for r in range(4)] == [[0, 1], [1, 0], [0, 1], [1, 0]]


def test_sizes_are_finished_one_at_a_time_in_order():
    sizes = [s.size for s in interleaved([8, 16, 32], 2, 3)]
    assert sizes == sorted(sizes)


def test_iterations_are_split_not_multiplied():
    # one tune does the timed work of one plain sweep per candidate
    iters, rounds, ncand = 20, 5, 4
    per = iterations_per_round(iters, rounds)
    assert per * rounds <= iters
    assert per * rounds * ncand <= iters * ncand
    assert iterations_per_round(3, 5) == 1


def test_default_rounds_are_enough_to_claim_a_gain():
    from ncclbench.tune.candidate_judge import SIGN_TEST_LEVEL, sign_test_p
    from ncclbench.tune.round_order import few_rounds_note

    for n in (20, 2):
        r = default_rounds(n)
        assert sign_test_p(r, r) <= SIGN_TEST_LEVEL
        assert few_rounds_note(r) is None
    assert sign_test_p(4, 4) > SIGN_TEST_LEVEL and "--rounds 5" in few_rounds_note(4)
    with pytest.raises(ValueError):
        list(interleaved([8], 2, 0))

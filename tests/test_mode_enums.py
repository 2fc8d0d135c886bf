"""-z and -a as named modes (core/config.py Blocking, Average): every mode has its banner and its
combination rule, and a value outside them is refused in one line."""

import pytest

from ncclbench.core.config import Average, Blocking
from ncclbench.output.text import BLOCKING_BANNERS
from ncclbench.run.bench_args import parse_bench_args


def test_every_blocking_mode_but_none_prints_its_banner():
    assert set(BLOCKING_BANNERS) == set(Blocking) - {Blocking.NONE}
    assert [int(m) for m in Blocking] == [0, 1, 2, 3] and [int(m) for m in Average] == [0, 1, 2, 3]


@pytest.mark.parametrize("flag, value, words", [("-z", "4", "invalid blocking mode"), ("-a", "4", "invalid average mode")])
def test_a_mode_outside_the_enum_is_refused(flag, value, words):
    with pytest.raises(Exception) as err:
        parse_bench_args("all_reduce_perf", [flag, value])
    assert words in str(err.value)

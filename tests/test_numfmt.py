"""nccl-tests' number formats (docs/behaviour.md §5.4, §5.5, §7.4)."""

import math
import time

import pytest

from ncclbench.output.numfmt import (
    format_g,
    format_mem,
    format_memory_line,
    format_number,
    format_wrong,
    now_string,
)


@pytest.mark.parametrize(
    "value, w7, w6",
    [  # the examples of docs/behaviour.md §5.4
        (1.234, "   1.23", "  1.23"),
        (1234.567, "1234.57", "1234.6"),
        (12345.67, "12345.7", " 12346"),
        (1234567, "1234567", " 1e+06"),
        (12345678.9, "1.2e+07", " 1e+07"),
    ],
)
def test_format_number_spec_examples(value, w7, w6):
    assert format_number(value, 7) == w7
    assert format_number(value, 6) == w6


@pytest.mark.parametrize(
    "value, width, text",
    [
        (0.0, 6, "  0.00"),
        (0.004999, 6, "  0.00"),
        (0.005001, 6, "  0.01"),
        (999.994, 6, "999.99"),
        (999.996, 6, "1000.0"),  # rounding up pushes it to 1 decimal
        (99999.96, 6, "100000"),
        (17752.1, 7, "17752.1"),
        (35286.7, 7, "35286.7"),
        (-1.5, 6, " -1.50"),
        (1e100, 7, "1.0e+10"),  # nccl-tests cuts "1.0e+100" to the width
        (1e100, 6, "1e+100"),
        (-1e100, 6, "-1e+10"),
    ],
)
def test_format_number_edges(value, width, text):
    out = format_number(value, width)
    assert out == text
    assert len(out) == width


def test_format_number_nan_keeps_width():
    assert format_number(math.nan, 7) == "    nan"


def test_format_wrong_is_percent_6g():
    assert format_wrong(0) == "     0"
    assert format_wrong(12) == "    12"
    assert format_wrong(1234567) == "1.23457e+06"


def test_format_g_footer_average():
    assert format_g(126.2) == "126.2"
    assert format_g(111.27412345) == "111.274"
    assert format_g(0.0) == "0"
    assert format_g(12345678.0) == "1.23457e+07"


@pytest.mark.parametrize(
    "amount, text",
    [
        (0, "0.00 B"),
        (1023, "1023 B"),
        (1024, "1.00 KB"),
        (50 * 1024, "50.0 KB"),
        (6 * 1024**2, "6.00 MB"),
        (586 * 1024**2, "586 MB"),
        (3 * 1024**3 // 2, "1.50 GB"),
        (-2048, "-2.00 KB"),
    ],
)
def test_format_mem_units(amount, text):
    assert format_mem(amount) == text


def test_memory_line_real_example():
    # §7.4: "Initialization 586 MB | User-Allocated 6.00 MB | Collective 0.00 B | Total  592 MB"
    line = format_memory_line(586 * 1024**2, 6 * 1024**2, 0)
    assert line == (
        "# GPU memory usage     : Initialization 586 MB | User-Allocated 6.00 MB | "
        "Collective 0.00 B | Total  592 MB"
    )


def test_now_string_layout():
    epoch = time.mktime((2026, 11, 21, 7, 48, 14, 0, 0, -1))
    assert now_string(epoch) == "2026-11-21 07:48:14"

"""Number formatting exactly as nccl-tests prints it (docs/behaviour.md §5.4, §5.5, §7.4).

Log parsers and people diff nccl-tests tables character by character, so every
field goes through these few helpers.  Python's `%` formatting follows C's
printf for finite values (correct rounding of the binary value, same `%g`
rules), which is what makes byte-identical output possible.
"""

from __future__ import annotations

import time

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"  # start/end time, -S timestamps


def format_number(value: float, width: int) -> str:
    """A time/bandwidth/per-iteration field of `width` characters, right-aligned.

    2 decimals if the result fits, else 1, else 0, else scientific with one
    mantissa decimal (width >= 7) or none, cut to `width` characters (nccl-tests
    formats into a buffer of `width + 1` bytes, so a longer exponent form is
    silently truncated).
    """
    value = float(value)
    for decimals in (2, 1, 0):
        text = "%*.*f" % (width, decimals, value)
        if len(text) <= width:
            return text
    text = "%*.*e" % (width, 1 if width >= 7 else 0, value)
    return text[:width]


def format_wrong(wrong: int | float) -> str:
    """The `#wrong` column: the element count printed with C's `%6g`."""
    return "%6g" % float(wrong)


def format_g(value: float) -> str:
    """C's `%g` (6 significant digits), used for the footer's average bus bandwidth."""
    return "%g" % float(value)


def format_mem(amount: int | float) -> str:
    """`-M` figure: binary units B/KB/MB/GB, 2 decimals below 10, 1 below 100, else 0 (§7.4)."""
    amount = float(amount)
    unit = "B"
    for name, divisor in (("GB", 1024.0**3), ("MB", 1024.0**2), ("KB", 1024.0)):
        if abs(amount) >= divisor:
            unit = name
            amount /= divisor
            break
    if abs(amount) < 10.0:
        decimals = 2
    elif abs(amount) < 100.0:
        decimals = 1
    else:
        decimals = 0
    return "%.*f %s" % (decimals, amount, unit)


def format_memory_line(initialization: int, user_allocated: int, collective: int) -> str:
    """The whole `-M` footer line (§5.5), e.g.
    `# GPU memory usage     : Initialization 586 MB | User-Allocated 6.00 MB | Collective 0.00 B | Total  592 MB`.
    """
    parts = [
        ("Initialization", initialization),
        ("User-Allocated", user_allocated),
        ("Collective", collective),
    ]
    body = "| ".join("%s %s " % (name, format_mem(v)) for name, v in parts)
    total = initialization + user_allocated + collective
    body += "| Total  " + format_mem(total)
    return "# %-20s : %s" % ("GPU memory usage", body)


def now_string(epoch: float | None = None) -> str:
    """Local time as nccl-tests writes it (`YYYY-MM-DD HH:MM:SS`)."""
    return time.strftime(TIME_FORMAT, time.localtime(epoch))


_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def human_size(n: int) -> str:
    """`64 MiB`; one decimal when the size is not a whole number of its unit (`1.5 KiB`).
    Shared by `compare`, the report's axis labels, tune's lines and the progress bar (here,
    beside the table's formats, so the progress bar imports no statistics code at start)."""
    for unit, div in _UNITS:
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    for unit, div in _UNITS:
        if n >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n} B"

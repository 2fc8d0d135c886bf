"""Which sizes a run measures (behaviour spec §2.7).

Pure functions so the CPU tests cover exactly the rules the GPU path uses.
"""

from __future__ import annotations

from collections.abc import Iterator


def sweep_sizes(min_bytes: int, max_bytes: int, step_bytes: int, step_factor: int) -> Iterator[int]:
    """Requested byte sizes: multiply by `step_factor` when it is > 1, else add
    `step_bytes`; the last size is the largest step that is <= max_bytes."""
    if min_bytes <= 0:
        raise ValueError("min_bytes must be positive (a zero size never advances)")
    if step_factor <= 1 and step_bytes <= 0:
        raise ValueError("step_bytes must be positive when no step factor is given")
    size = min_bytes
    while size <= max_bytes:
        yield size
        size = size * step_factor if step_factor > 1 else size + step_bytes


def warmup_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Warm-up sizes: always doubling from min_bytes to max_bytes, whatever -f/-i say."""
    if min_bytes <= 0:
        raise ValueError("min_bytes must be positive")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def rotation_steps(span_bytes: int, max_bytes: int) -> int:
    """How many distinct buffer offsets the timed loop rotates through
    (spec §2.9): floor(max_bytes / span), 1 when the span is 0."""
    if span_bytes <= 0:
        return 1
    return max(1, max_bytes // span_bytes)

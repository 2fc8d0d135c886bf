"""`ncclbench <test> ... --baseline NAME`: the gate (gate.py) of the run just stored, against a
baseline of the result store and its history."""

from __future__ import annotations

import sys
from typing import Any, Protocol, TextIO

from ..core.errors import ArgumentError
from .gate import gate
from .gate_format import format_gate
from .gate_verdicts import GateResult


class BaselineStore(Protocol):
    """What the gate reads from the result store (store/db.py's ResultStore)."""

    def get_baseline(self, name: str) -> int | None: ...
    def get_baseline_runs(self, name: str) -> list[int]: ...
    def get_run(self, run_id: int) -> Any: ...


def baseline_history(store: BaselineStore, name: str) -> tuple[int, list[int]]:
    """(reference run, its other runs) of a stored baseline; ArgumentError if unknown."""
    runs = store.get_baseline_runs(name)
    ref = store.get_baseline(name)
    if not runs or ref is None:
        raise ArgumentError(f"no baseline named {name!r} (set one with "
                            "`ncclbench baseline set NAME RUN`)")
    return ref, [r for r in runs if r != ref]


def check_against_baseline(store: BaselineStore, run_id: int, name: str, max_drop_pct: float = 5.0,
                           max_rise_pct: float | None = None,
                           placement: str = "out_of_place") -> GateResult:
    """For `ncclbench <test> --baseline NAME`: gate a just-stored run."""
    ref, more = baseline_history(store, name)
    history = [store.get_run(r) for r in more if r != run_id]
    return gate(store.get_run(run_id), store.get_run(ref), max_drop_pct, max_rise_pct, placement,
                history=history)


def gate_stored_run(store: BaselineStore, run_id: int, name: str, max_drop_pct: float = 5.0,
                    max_rise_pct: float | None = None, out: TextIO | None = None) -> int:
    """`ncclbench <test> ... --baseline NAME`: print the check of the run just
    stored and return its exit code (0 ok, 7 regression, 9 not judged)."""
    g = check_against_baseline(store, run_id, name, max_drop_pct, max_rise_pct)
    print(format_gate(g, name), end="", file=out or sys.stdout)
    return g.exit_code

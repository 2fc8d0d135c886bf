"""What the comparison, the baseline rules and the gate read of a run: `RunLike`, met by a
stored run (db.StoredRun) and an imported one (imported.ImportedRun) alike."""

from __future__ import annotations

from typing import Protocol

from ..core.config import BenchOptions
from ..core.results import ResultRow, RunInfo, RunSummary


class RunLike(Protocol):
    """A stored or imported run, as read here (read-only: attributes or properties)."""

    @property
    def label(self) -> str: ...
    @property
    def info(self) -> RunInfo: ...
    @property
    def options(self) -> BenchOptions: ...
    @property
    def rows(self) -> list[ResultRow]: ...
    @property
    def summary(self) -> RunSummary | None: ...
    @property
    def status(self) -> str: ...

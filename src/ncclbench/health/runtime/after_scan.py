"""What the coordinating process does with a finished scan besides the table, JSON and
drain list (`health.outputs.scan_output`): the Prometheus metrics file, the JUnit file, and the
drain action on the scheduler (`health.outputs.drain`).  `ncclbench health` hands an
`AfterScan` to the service as `ServiceOptions.after_scan`; it runs once, in the process
that coordinated the scan, after the verdict is written."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from .coordinate import ScanOutcome


@dataclass(frozen=True)
class AfterScan:
    metrics_path: str | None = None
    junit_path: str | None = None
    drain_action: str | None = None  # "slurm" / "kubernetes"
    dry_run: bool = False

    def check(self) -> None:
        """Before the scan: the output files can be written (one clear line otherwise)."""
        from ...output.metrics import check_writable

        if self.metrics_path:
            check_writable(self.metrics_path, "--metrics")
        if self.junit_path:
            check_writable(self.junit_path, "--junit")

    def __call__(self, outcome: ScanOutcome) -> None:
        from ...output import junit, metrics
        from ..outputs.drain import drain

        doc = outcome.document()
        if self.metrics_path:
            metrics.write_textfile(self.metrics_path, metrics.health_metrics(doc))
        if self.junit_path:
            junit.write(self.junit_path, junit.health_junit(doc))
        if self.drain_action:
            drain(self.drain_action, outcome.report.findings, outcome.report.drain, self.dry_run, sys.stdout,
                  sys.stderr)

    @property
    def wanted(self) -> bool:
        return bool(self.metrics_path or self.junit_path or self.drain_action)

"""One run judged: the glue the benchmark, `ncclbench explain` and the report call.

How a run uses it (`live`, `run_explain`): each host's first local rank reads its topology
(`gather_topology`), rank 0 keeps the GPUs the job uses (`hosts_in_use`), prints them in the banner
(`topology.format_topology_lines`) and stores them under `JSON_KEY`; after the table `judge_run`
gives the ceiling, the plateau, the verdict and the traps, whose `RunJudgement.lines()` follow
`# Avg bus bandwidth` and whose `to_dict()` goes under `JSON_KEY` too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.results import EXPLAIN_KEY
from .ceiling import Ceiling, expected_ceiling
from .nccl_log import NcclLogFacts, format_bytes
from .plateau_verdict import Plateau, Verdict, judge, plateau_busbw, summary_line
from .topology import HostTopology
from .traps import TrapReport, find_traps, format_trap_lines

JSON_KEY = EXPLAIN_KEY  # the extension key in the run's JSON (nccl-tests' own keys stay as they are)


@dataclass
class RunJudgement:
    collective: str
    ceiling: Ceiling
    plateau: Plateau
    verdict: Verdict
    traps: TrapReport
    # the recorded healthy curve the verdict read (`expected_curve.Expectation.to_dict()` plus the run's
    # sizes' expected busbw under "per_size"), or {"unknown": why} when none applies
    expected: dict[str, Any] = field(default_factory=dict)

    def lines(self) -> list[str]:
        out = [summary_line(self.plateau, self.ceiling, self.verdict)]
        if self.ceiling.reasoning:
            out.append(f"#   why: {self.ceiling.reasoning}")
        if self.expected.get("label"):
            src = str(self.expected["source"]).split("; ")[0]  # where and when; the JSON keeps the whole
            out.append(f"#   expected curve: healthy {self.expected['label']}, recorded in {src}"
                       + (f"; {self.expected['stand_in']}" if self.expected.get("stand_in") else ""))
        if self.expected.get("ratio"):
            out.append("#   measured / expected per size: " + ", ".join(
                f"{format_bytes(int(size))} {100 * r:.0f}%" for size, r in self.expected["ratio"]))
        if self.ceiling.nccl_predicted is not None:
            out.append(f"#   {self.ceiling.nccl_predicted_text}")
        return out + format_trap_lines(self.traps)

    def to_dict(self) -> dict[str, Any]:
        return {"collective": self.collective, "ceiling": self.ceiling.to_dict(), "plateau": self.plateau.to_dict(),
                "verdict": self.verdict.to_dict(), "traps": self.traps.to_dict(), "expected": self.expected}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunJudgement:
        return cls(d["collective"], Ceiling.from_dict(d["ceiling"]), Plateau(**d["plateau"]),
                   Verdict.from_dict(d["verdict"]), TrapReport.from_dict(d["traps"]), dict(d.get("expected") or {}))


def judge_run(hosts: Sequence[HostTopology], collective: str, nranks: int, rows: Sequence[tuple[int, float]], *,
              env: Mapping[str, str] | None = None, log: NcclLogFacts | None = None,
              nccl_version: str | None = None, no_topology: str = "no topology facts",
              host_env: Mapping[str, Mapping[str, str]] | None = None) -> RunJudgement:
    """Judge one collective's sweep.  `hosts`: the job's hosts (see `hosts_in_use`); `rows`: (size in
    bytes, out-of-place busbw GB/s) per measured size; `env`: the run's NCCL_* environment; `log`:
    NCCL's own log facts, when captured; `no_topology`: why `hosts` is empty, if it is; `host_env`:
    host -> the NCCL settings its ranks ran with (each host judged with its own)."""
    ceiling = expected_ceiling(hosts, collective, nranks, log=log, env=env, nccl_version=nccl_version,
                               host_env=host_env)
    plateau = plateau_busbw(rows)
    return RunJudgement(collective, ceiling, plateau, judge(plateau, ceiling),
                        find_traps(hosts, log, env, nnodes=len(hosts) or None, no_topology=no_topology,
                                   host_env=host_env))

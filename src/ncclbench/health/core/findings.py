"""What a health scan reports: one finding per faulty component, with its evidence.

A fault is confirmed only by two independent measurements (a second
communicator, and for a node a second partner); one bad measurement alone is
reported as a suspect, never as a fact.  Findings of several phases about
one host are merged so each component is named once, with every piece of
evidence that points at it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from ...output.health_fields import GPU_COMPONENT, finding_slot, where_text

__all__ = ["finding_slot", "where_text"]  # read by output/, defined there (a lower layer)

# components; a path is the way between two leaf switches (its detail "leaf3<->leaf7", no host:
# the fabric's, like a link, drained from no host)
GPU, NODE_INTRA, NODE_NIC, LINK, PATH, RAIL, NO_ANSWER_C, FLEET = (
    GPU_COMPONENT, "node intra", "node nic", "link", "path", "rail", "no answer", "fleet")
NODE_COMPONENTS = (GPU, NODE_INTRA, NODE_NIC, NO_ANSWER_C)

# verdicts
SLOW_V, NO_ANSWER_V, WRONG_V, SUSPECT_V, UNJUDGED_V, ABOVE_MODEL_V = (
    "slow", "no answer", "wrong results", "suspect (not confirmed)", "not judged", "above the model")
CONFIRMED = (SLOW_V, NO_ANSWER_V, WRONG_V)


@dataclass
class Finding:
    component: str
    hosts: tuple[str, ...]  # one host; two for a link; none for a path, a rail or the fleet
    verdict: str
    detail: str = ""  # the label: "gpu 3" ("rank 3" on the CPU backend), "rail 5", "all rails", ...
    measured: float | None = None  # busbw GB/s (median of the measurements that convicted it)
    expected: float | None = None  # the reference it was compared with
    z: float | None = None
    unit: str = "GB/s"
    evidence: list[str] = field(default_factory=list)
    pct_expected: float | None = None  # % of the expected ceiling (explain model), when known
    cause: list[str] = field(default_factory=list)  # explain traps that explain it (health/core/causes.py)
    setting: bool = False  # explained by the ranks' NCCL settings alone: a fault of the job, not the node
    # the host's slot a GPU finding names (GPU index, or CPU rank): what readers key on, not the label
    slot: int | None = None

    @property
    def confirmed(self) -> bool:
        return self.verdict in CONFIRMED

    @property
    def where(self) -> str:
        if self.component == LINK:
            return " <-> ".join(self.hosts)
        return self.hosts[0] if self.hosts else "*"

    def key(self) -> tuple:
        # a host that does not answer is one finding whichever GPU or phase noticed it
        return (self.component, self.hosts, "" if self.component == NO_ANSWER_C else self.detail)

    def to_json(self) -> dict:
        return {"component": self.component, "hosts": list(self.hosts), "detail": self.detail,
                "verdict": self.verdict, "confirmed": self.confirmed, "measured": self.measured,
                "expected": self.expected, "z": self.z, "unit": self.unit,
                "pct_expected": self.pct_expected, "evidence": list(self.evidence), "cause": list(self.cause),
                "setting": self.setting, "slot": self.slot}


def drain_hosts(findings: Iterable[Finding]) -> list[str]:
    """Hosts a scheduler should take out: confirmed faults of a node's own parts.
    A slow link is the fabric's (a cable, a switch port): both its hosts work
    with everyone else, so neither is drained; it is reported for the fabric team.
    Nor is a fault the job's own NCCL settings explain (`setting`): the node is fine."""
    out: dict[str, None] = {}
    for f in findings:
        if f.confirmed and f.component in NODE_COMPONENTS and not f.setting:
            for h in f.hosts:
                out[h] = None
    return list(out)


def merge(findings: Iterable[Finding]) -> list[Finding]:
    """One finding per component: a GPU that is slow explains its host's slow
    intra-node group; a host that gives no answer in several phases is one
    'no answer'; a NIC fault on rail r explains a slow rail-r group.  What is
    explained becomes evidence of what explains it."""
    items = list(findings)
    by_key: dict[tuple, Finding] = {}
    for f in items:
        old = by_key.get(f.key())
        if old is None:
            if f.component == NO_ANSWER_C and f.detail:
                f.evidence = [f"{f.detail}: {e}" for e in f.evidence]
                f.detail = ""
            by_key[f.key()] = f
        else:
            old.evidence.extend(e for e in f.evidence if e not in old.evidence)
            if not old.confirmed and f.confirmed:
                old.verdict = f.verdict
    out = list(by_key.values())
    dead = {f.hosts[0] for f in out if f.component == NO_ANSWER_C and f.confirmed}
    gpu_hosts = {f.hosts[0] for f in out if f.component == GPU and f.confirmed}
    nic = [f for f in out if f.component == NODE_NIC and f.confirmed]
    kept = []
    for f in out:
        host = f.hosts[0] if f.hosts else None
        if f.component != NO_ANSWER_C and host in dead and f.component in NODE_COMPONENTS:
            _attach(out, NO_ANSWER_C, host, f)  # a dead host's other symptoms are the same fault
            continue
        if f.component == NODE_INTRA and host in gpu_hosts:
            _attach(out, GPU, host, f)
            continue
        if f.component == RAIL and f.verdict == NO_ANSWER_V and dead:
            _attach(out, NO_ANSWER_C, sorted(dead)[0], f)  # a rail group holding a dead host cannot answer
            continue
        if f.component == RAIL and f.confirmed:
            rail = f.detail.removeprefix("rail ")
            explaining = [n for n in nic if n.detail in (f"rail {rail}", "all rails")]
            if explaining:
                for n in explaining:
                    n.evidence.append(f"{f.detail} across the fabric was slow too ({_first(f.evidence)}), "
                                      f"which this NIC explains")
                continue
        kept.append(f)
    return kept


def _attach(out: list[Finding], component: str, host: str, f: Finding) -> None:
    for owner in out:
        if owner.component == component and owner.hosts and owner.hosts[0] == host and owner.confirmed:
            owner.evidence.append(f"also {f.component} {f.detail}".rstrip() + f": {_first(f.evidence)}")
            return


def _first(evidence: list[str]) -> str:
    return evidence[0] if evidence else "no detail"

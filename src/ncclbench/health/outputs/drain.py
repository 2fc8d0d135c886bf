"""Taking faulty hosts out of service: Slurm (`scontrol`) and Kubernetes (`kubectl`).

`ncclbench health --drain-action slurm|kubernetes` acts on the scan's drain list
(the hosts of confirmed node faults: `health.core.findings.drain_hosts`; a slow link or a
suspect drains nobody).  The commands are built by pure functions, so a test
and `--dry-run` see exactly what would run; `execute` runs them.

* Slurm: `scontrol update NodeName=H State=DRAIN Reason="..."` per host - the
  node finishes its running jobs and takes no new ones; `sinfo -R` lists the
  reason, and `scontrol update NodeName=H State=RESUME` (`resume_commands`)
  returns it.  The scan's host names are the ranks' hosts as NCCL groups them
  (launch/hostid.py: NCCL_HOSTID where set, else the first label of
  `gethostname()`); the host name is the Slurm NodeName on most clusters.  Where
  it is not (or NCCL_HOSTID names something else), NCCLBENCH_HEALTH_HOST_MAP names
  the hosts as the scheduler knows them.
* Kubernetes: a `NoSchedule` taint (new pods stay off the node; running ones
  are left alone, as a Slurm drain leaves running jobs) and a label, both under
  `TAINT_KEY`, plus the reason as an annotation (a label value cannot hold it).

A reason says what was found and where to read the rest: "ncclbench health:
gpu 3 slow (health:12)".  Slurm keeps a reason on one line, so it is cut to
`MAX_REASON` characters.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from ..core.findings import NODE_COMPONENTS, Finding, where_text

ACTIONS = ("slurm", "kubernetes")
TAINT_KEY = "ncclbench.health/fault"  # taint, label and annotation key prefix on Kubernetes nodes
REASON_ANNOTATION = "ncclbench.health/reason"
MAX_REASON = 120
COMMAND_TIMEOUT_S = 30.0


def host_reasons(findings: Iterable[Finding], hosts: Sequence[str], scan_ref: str | None = None) -> dict[str, str]:
    """host -> one line saying why it is drained: its confirmed node findings with the
    cause explain's traps named ("gpu 3 slow; node nic rail 1 slow (gdr_off)"), and the
    scan to read for the evidence."""
    parts: dict[str, list[str]] = {h: [] for h in hosts}
    for f in findings:
        if not f.confirmed or f.component not in NODE_COMPONENTS or f.setting:
            continue  # what drains a host (health.core.findings.drain_hosts): not a fault of the job's NCCL settings
        what = where_text(f.component, f.detail)
        said = what if f.verdict == f.component else f"{what} {f.verdict}"
        if f.cause:
            said += f" ({', '.join(f.cause)})"
        for h in f.hosts:
            if h in parts and said not in parts[h]:
                parts[h].append(said)
    out = {}
    for h in hosts:
        text = "ncclbench health: " + ("; ".join(parts[h]) or "confirmed fault")
        tail = f" ({scan_ref})" if scan_ref else ""
        if len(text) + len(tail) > MAX_REASON:
            text = text[:MAX_REASON - len(tail) - 3] + "..."
        out[h] = text + tail
    return out


def slurm_commands(reasons: Mapping[str, str]) -> list[list[str]]:
    """One `scontrol update` per host: State=DRAIN with its reason."""
    return [["scontrol", "update", f"NodeName={h}", "State=DRAIN", f"Reason={_one_line(r)}"]
            for h, r in reasons.items()]


def kubernetes_commands(reasons: Mapping[str, str]) -> list[list[str]]:
    """Per host: taint NoSchedule, label, and annotate with the reason (all --overwrite,
    so a second scan updates rather than fails)."""
    out = []
    for h, r in reasons.items():
        out.append(["kubectl", "taint", "nodes", h, f"{TAINT_KEY}=true:NoSchedule", "--overwrite"])
        out.append(["kubectl", "label", "nodes", h, f"{TAINT_KEY}=true", "--overwrite"])
        out.append(["kubectl", "annotate", "nodes", h, f"{REASON_ANNOTATION}={_one_line(r)}", "--overwrite"])
    return out


def resume_commands(action: str, hosts: Iterable[str]) -> list[list[str]]:
    """What undoes a drain, once the host is repaired (printed by --dry-run for reference,
    run by the tests)."""
    if action == "slurm":
        return [["scontrol", "update", f"NodeName={h}", "State=RESUME"] for h in hosts]
    out = []
    for h in hosts:
        out.append(["kubectl", "taint", "nodes", h, f"{TAINT_KEY}:NoSchedule-"])
        out.append(["kubectl", "label", "nodes", h, f"{TAINT_KEY}-"])
        out.append(["kubectl", "annotate", "nodes", h, f"{REASON_ANNOTATION}-"])
    return out


def drain_commands(action: str, reasons: Mapping[str, str]) -> list[list[str]]:
    if action == "slurm":
        return slurm_commands(reasons)
    if action == "kubernetes":
        return kubernetes_commands(reasons)
    raise ValueError(f"unknown drain action {action!r}; one of {', '.join(ACTIONS)}")


@dataclass
class CommandResult:
    argv: list[str]
    returncode: int | None  # None: not run (--dry-run) or the program is missing
    output: str = ""

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def execute(commands: Sequence[Sequence[str]], dry_run: bool, out: TextIO, err: TextIO,
            timeout_s: float = COMMAND_TIMEOUT_S) -> list[CommandResult]:
    """Run each command (or, with `dry_run`, print it as a shell line on `out`).  A
    command that fails is one line on `err`; the others still run (one broken host
    entry must not keep the rest in service)."""
    results = []
    for argv in commands:
        argv = list(argv)
        line = shlex.join(argv)
        if dry_run:
            print(line, file=out, flush=True)
            results.append(CommandResult(argv, None, "dry run"))
            continue
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
        except FileNotFoundError:
            print(f"ncclbench: health: drain: {argv[0]} not found on PATH; not run: {line}", file=err, flush=True)
            results.append(CommandResult(argv, None, f"{argv[0]} not found"))
            continue
        except subprocess.TimeoutExpired:
            print(f"ncclbench: health: drain: no answer in {timeout_s:g} s: {line}", file=err, flush=True)
            results.append(CommandResult(argv, None, "timeout"))
            continue
        text = (p.stdout + p.stderr).strip()
        if p.returncode != 0:
            print(f"ncclbench: health: drain: {line} failed (exit {p.returncode})"
                  + (f": {text.splitlines()[-1]}" if text else ""), file=err, flush=True)
        else:
            print(f"# health: drained: {line}", file=err, flush=True)
        results.append(CommandResult(argv, p.returncode, text))
    return results


def drain(action: str, findings: Sequence[Finding], hosts: Sequence[str], dry_run: bool, out: TextIO,
          err: TextIO, scan_ref: str | None = None) -> list[CommandResult]:
    """The whole action: reasons for `hosts` (the scan's drain list), the commands, run or
    printed.  No host to drain: nothing runs, one line says so."""
    if not hosts:
        print(f"# health: drain ({action}): no host to drain", file=err, flush=True)
        return []
    commands = drain_commands(action, host_reasons(findings, hosts, scan_ref))
    if dry_run:
        print(f"# health: drain ({action}), dry run: these commands would run", file=err, flush=True)
    return execute(commands, dry_run, out, err)


def _one_line(text: str) -> str:
    return " ".join(text.split())

"""A run judged again from what was kept of it: a stored run, or an imported nccl-tests log.

What each kind of run carries (and what is then unknown, said so):

* a run ncclbench measured: the topology of its hosts at start
  (`RunInfo.extra[EXPLAIN_KEY]["topology"]`) and the NCCL settings of each host's ranks
  (`["host_env"]`), NCCL's log facts and the probe's per-size choices (`RunSummary.explain`),
  its NCCL_* environment (rank 0's);
* an imported nccl-tests text log: NCCL's INFO lines, if the log has them
  (`RunInfo.extra["nccl_log"]`, raw lines read again here), the environment
  NCCL said it read; no topology (nccl-tests does not print it);
* a run stored before explain existed, or with --no-explain: rows only.

The run's objects are read by attribute (`info`, `rows`, `summary`, `env`),
so a `store.db.StoredRun` and a `store.imported.ImportedRun` both work.
"""

from __future__ import annotations

from typing import Any

from ..core.results import EXPLAIN_KEY
from ..nccl.version_text import version_text
from .launch_line import launch_facts
from .log_topology import log_topology
from .nccl_capture import choices_from
from .nccl_log import NcclLogFacts, facts_from_stored
from .run_explain import Explained, RunFacts, explain_run, tests_of
from .topology import HostTopology

EXTRA_NCCL_LOG = "nccl_log"  # store.importers.EXTRA_NCCL_LOG: the raw NCCL lines of an imported log


def _nccl_version(code: int | None) -> str | None:
    return version_text(code) if code else None


def run_facts(run: Any) -> RunFacts:
    """Everything kept of `run` (a StoredRun or ImportedRun), for `explain_run`."""
    info, summary = run.info, run.summary
    start = info.extra.get(EXPLAIN_KEY) or {}
    end = (summary.explain if summary is not None else None) or {}
    backend = "mpi" if info.backend == "mpi" else "nccl" if info.backend == "nccl" else "nccl-tests"
    f = RunFacts(collective=run.options.collective, nranks=info.nranks or 1, rows=list(run.rows), backend=backend,
                 env={k: v for k, v in (run.env or {}).items() if k.startswith("NCCL_")},
                 nccl_version=_nccl_version(info.nccl_version_code), tests=tests_of(run.rows))
    f.hosts = [HostTopology.from_dict(h) for h in start.get("topology") or []]
    f.host_env = {str(h): {str(k): str(v) for k, v in e.items()} for h, e in (start.get("host_env") or {}).items()}
    if not f.hosts:
        f.topology_unknown = start.get("topology_unknown") or (
            "nccl-tests prints no topology: an imported log carries none" if backend == "nccl-tests" else
            "not recorded with this run (run with --no-explain, or stored before ncclbench recorded topology)")
    if end.get("nccl_log"):
        f.log = facts_from_stored(end["nccl_log"])
        f.notes = list(end.get("capture_notes") or [])
    elif EXTRA_NCCL_LOG in info.extra:
        f.log = facts_from_stored(info.extra[EXTRA_NCCL_LOG])
    elif backend != "mpi":
        status = getattr(run, "status", "complete")
        f.log_unknown = end.get("nccl_log_unknown") or (
            "the log has no NCCL INFO lines (NCCL_DEBUG=INFO prints them)" if backend == "nccl-tests" else
            f"the run ended ({status}) before NCCL's account was read" if status != "complete" else
            "NCCL's log was not kept with this run")
    if f.log is not None and f.log.version:
        f.nccl_version = f.nccl_version or f.log.version
    if end.get("probe") is not None:
        f.probe = [choices_from(calls) for calls in end["probe"]]
        f.tests = [(str(t[0]), str(t[1]), int(t[2])) for t in end.get("tests") or []]
    f.status = getattr(run, "status", "complete")
    failure = info.extra.get("failure") or {}
    f.failure_lines = list(failure.get("lines") or []) + list(failure.get("errors") or [])
    f.end_reason = info.extra.get("end_reason") or getattr(run, "end_reason", None) or ""
    f.collective_source = info.extra.get("collective_source") or ""
    f.nccl_log_only = bool(info.extra.get("nccl_log_only"))
    f.ends_in_gap = bool(info.extra.get("ends_in_gap"))
    if summary is not None and summary.out_of_bounds:
        f.out_of_bounds = summary.out_of_bounds
    f.version_note = _version_note(info.nccl_headers_code, info.nccl_version_code, f.log)
    if not f.hosts and backend == "nccl-tests":
        launch = launch_facts(list(info.extra.get("launch_lines") or []))
        table = info.extra.get("collective_table") or {}
        f.log_topology = log_topology(info.devices, f.log, launch, f.env, table.get("nranks"))
        if f.log_topology.nranks:
            f.nranks = f.log_topology.nranks
    return f


def _version_note(headers: int | None, library: int | None, log: NcclLogFacts | None) -> str | None:
    """nccl-tests built against one NCCL and run with another (its banner), or ranks on different NCCLs."""
    h, lib = _nccl_version(headers), _nccl_version(library)
    # a newer library than the headers is NCCL's supported case (its ABI only grows); an older one is not
    if h and lib and headers and library and library < headers and h.split(".")[:2] != lib.split(".")[:2]:
        return (f"nccl-tests was built against NCCL {h} (nccl-headers) and ran with the older NCCL {lib} "
                "(nccl-library)")
    if log is not None:
        note = next((u for u in log.unparsed if u.startswith(("several NCCL versions", "ranks disagree on version"))),
                    None)
        if note:
            return f"NCCL's lines show {note}"
    return None


def explain_stored(run: Any) -> Explained:
    return explain_run(run_facts(run))

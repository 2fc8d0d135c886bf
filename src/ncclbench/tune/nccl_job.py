"""NCCL candidates inside one job: one set of communicators per candidate.

What NCCL reads when (docs/tuning.md, from NCCL's source): NCCL_ALGO and
NCCL_PROTO are read with getenv/ncclGetEnv inside ncclTopoTuneModel, which
runs at every communicator init (src/init.cc -> src/graph/tuning.cc), so a
variable set just before one communicator's init applies to that
communicator only.  Channel limits have no such variable (NCCL_MIN_CTAS,
NCCL_MAX_CTAS, NCCL_MIN/MAX_NCHANNELS are NCCL_PARAMs, cached at the first
read in the process), so CTA candidates go through ncclConfig_t.minCTAs /
maxCTAs, which every communicator carries on its own.

Each candidate gets its own workers from the backend's ordinary set-up
(`create_nccl_workers`: communicators, streams, buffers), made with its
environment set and its config fields added, so a failure aborts only that
candidate's communicators.  The cost is GPU memory: every candidate holds
its own send/receive buffers (2 x the largest size per GPU).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from ..backends.worker import Worker
from ..collectives.collective import Collective
from ..core.config import BenchOptions
from ..core.errors import BenchError, ExitCode
from ..launch.hostcomm import HostComm
from ..run.timing import Placement
from .candidates import Candidate, Skipped


@contextmanager
def scoped_env(pairs: tuple[tuple[str, str], ...]) -> Iterator[None]:
    """Set `pairs` in this process's environment (C getenv sees os.environ)
    for the duration, then restore exactly what was there."""
    saved = {k: os.environ.get(k) for k, _ in pairs}
    try:
        for k, v in pairs:
            os.environ[k] = v
        yield
    finally:
        for k, old in saved.items():
            if old is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = old


class NcclSwitcher:
    """Candidates of the GPU backend: their own communicators, made up front."""

    def __init__(self, opts: BenchOptions, host: HostComm, coll: Collective, cands: list[Candidate]):
        from ..backends.nccl_setup import create_nccl_workers
        from ..nccl.binding import get_library

        self.lib = get_library(opts.nccl_lib)
        self.workers: dict[str, list[Worker]] = {}
        self.dropped: list[Skipped] = []
        for cand in cands:
            error: tuple[str, int] | None = None
            try:
                with scoped_env(cand.env):
                    self.workers[cand.label] = list(create_nccl_workers(opts, host, coll, dict(cand.config)))
            except BenchError as exc:
                error = (exc.message, int(exc.code))
            except ValueError as exc:  # a config field this libnccl lacks
                error = (str(exc), int(ExitCode.NOT_IMPLEMENTED))
            failed = host.allreduce(1.0 if error else 0.0, "max")
            if failed:
                why, code = next((e for e in host.allgather(error) if e), ("another rank failed", 1))
                if cand.is_default:  # nothing to compare with: the run fails as a plain run would
                    raise BenchError(why, ExitCode(code), all_ranks=True)
                self._close(cand.label)
                self.dropped.append(Skipped(cand.label, f"communicator init failed: {why}"))
        self.control = self.workers["default"][0]

    def worker(self, cand: Candidate) -> Worker:
        return self.workers[cand.label][0]

    def apply(self, cand: Candidate) -> None:
        """Nothing to switch: the candidate's communicators were made with its settings."""

    def probe(self, cand: Candidate, placement: Placement) -> tuple[str | None, str | None]:
        """One call on the candidate's communicators, waited for with the job's
        bound; NCCL's refusal (ncclGetLastError's text) is the reason."""
        worker = self.worker(cand)
        try:
            placement.issue(placement.calls(0))
            worker.wait()
        except BenchError as exc:
            text = getattr(exc, "last_error", "") or exc.message
            return None, text.strip()
        return None, None

    def drop(self, cand: Candidate) -> None:
        self._close(cand.label)

    def _close(self, label: str) -> None:
        for w in self.workers.pop(label, []):
            w.abort()
            try:
                w.close()
            except BenchError:
                pass

    def abort(self) -> None:
        """A peer died (the job's failure callback, from another thread): abort every candidate's
        communicators so no rank stays stuck in a device wait; `close` still releases them."""
        for workers in list(self.workers.values()):
            for w in workers:
                w.abort()

    def close(self) -> None:
        for label in list(self.workers):
            for w in self.workers.pop(label):
                w.close()

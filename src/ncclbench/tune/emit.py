"""Writing a tune result in the forms people and libraries read.

* the report: per size, the default against the best candidate (gain,
  noise, rounds won); per band, the setting to use;
* environment lines: `NCCL_ALGO=...`, `MPIR_CVAR_..._ALGORITHM=...`.  An
  environment variable holds for every message size, so a band's lines are
  exact only for that band; the tuner config is the per-size form;
* NCCL's example tuner plugin config (ext-tuner/example, NCCL 2.27+; in
  plugins/tuner/example from 2.30): CSV lines
  `collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks`.
  Facts of its parser (plugin.c at v2.28.9) these lines respect: only lines
  starting with '#' are comments (a header row would be read as an
  allreduce line), fgets reads 256-byte lines, unknown names silently become
  allreduce/ring/simple, and before matching it sets `*nChannels = 1`, so
  channels=-1 (documented as "keep NCCL's default") gives ONE channel; 0 is
  written instead, which NCCL 2.22+ reads as "keep its own channel count"
  (src/enqueue.cc: `nMaxChannels == 0 ? info->nMaxChannels : nMaxChannels`);
* JSON: `TuneResult.to_json` plus the verdicts and bands.
"""

from __future__ import annotations

from typing import Any

from ..core.config import Backend
from ..output.numfmt import human_size
from . import nccl_rules
from .candidate_judge import Band, plugin_ranges
from .candidates import DEFAULT
from .result import TuneResult


def pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def band_text(b: Band) -> str:
    span = human_size(b.lo) if b.lo == b.hi else f"{human_size(b.lo)} .. {human_size(b.hi)}"
    return span


def env_lines_for(result: TuneResult, label: str) -> list[str]:
    """`NAME=value` lines that select candidate `label` in a new process ([] for the default)."""
    return [f"{k}={v}" for k, v in result.candidate(label).process_env()]


def band_settings(result: TuneResult) -> list[dict[str, Any]]:
    """One entry per band: range, winner, env lines, gains."""
    out = []
    blist = result.bands()
    for b, (lo, hi) in zip(blist, plugin_ranges(blist)):
        cand = result.candidate(b.winner)
        out.append({"lo": b.lo, "hi": b.hi, "range": [lo, hi], "winner": b.winner,
                    "env": env_lines_for(result, b.winner), "config": dict(cand.config),
                    "sizes": list(b.sizes), "median_gain": b.median_gain, "min_gain": b.min_gain})
    return out


def won_bands(result: TuneResult) -> list[dict[str, Any]]:
    """The band settings a candidate won: the ones that get env lines, a tuner-config line and
    a --verify (the default keeps the others)."""
    return [s for s in band_settings(result) if s["winner"] != DEFAULT.label]


def env_file(result: TuneResult) -> str:
    """Shell-sourceable lines, one block per band that beat the default."""
    lines = [f"# ncclbench tune {result.collective}: {result.library}, {result.nranks} ranks, "
             f"{result.nnodes} node(s)",
             "# An environment variable holds for every message size: use the block of the",
             "# size range that matters to you (the tuner config sets each range on its own)."]
    wins = won_bands(result)
    if not wins:
        lines.append("# no setting beat the library's default by more than the measured noise")
    clash = bands_disagree(wins)
    if clash:
        lines.append("# The bands below set the same variable to different values (sourcing them all would keep "
                     "the last): each block is commented out; uncomment the one for your sizes.")
    for s in wins:
        lines.append(f"# {band_range(s)}: {s['winner']}, median gain {pct(s['median_gain'])}")
        lines += [f"{'# ' if clash else ''}export {e}" for e in s["env"]]
    return "\n".join(lines) + "\n"


def band_range(band: dict[str, Any]) -> str:
    """A band's message sizes as printed: '512 B .. 2 KiB'."""
    return f"{human_size(band['lo'])} .. {human_size(band['hi'])}"


def bands_disagree(bands: list[dict[str, Any]]) -> bool:
    """Whether two bands set one environment variable to different values: an environment variable
    holds for every size, so such lines cannot all be used at once."""
    seen: dict[str, str] = {}
    for band in bands:
        for line in band["env"]:
            name, _, value = str(line).partition("=")
            if seen.setdefault(name, value) != value:
                return True
    return False


def tuner_config(result: TuneResult) -> tuple[str, list[str]]:
    """(CSV text for NCCL's example tuner plugin, notes on bands it cannot express).

    Only NCCL results of the five functions NCCL tunes have lines; a band
    whose winner leaves algorithm or protocol to NCCL cannot be written
    (the plugin needs both), and a default band needs no line."""
    notes: list[str] = []
    head = [f"# ncclbench tune {result.collective}: {result.library}, {result.nranks} ranks, "
            f"{result.nnodes} node(s), {result.datatype}",
            "# NCCL example tuner plugin (NCCL_TUNER_PLUGIN=<libnccl-tuner-example.so>,",
            "# NCCL_TUNER_CONFIG_FILE=<this file>). Columns:",
            "# collective,min_bytes,max_bytes,algorithm,protocol,channels,nNodes,nRanks",
            "# channels 0 = NCCL's own count (-1 would mean 1 channel in this plugin)"]
    if result.backend != Backend.NCCL or result.collective not in nccl_rules.PLUGIN_COLLECTIVE:
        return "", [f"no tuner config: it is NCCL's, for {', '.join(nccl_rules.PLUGIN_COLLECTIVE)} only"]
    body = []
    for s in won_bands(result):
        c = result.candidate(s["winner"])
        if c.algo is None or c.proto is None:
            notes.append(f"{human_size(s['lo'])} .. {human_size(s['hi'])}: {c.label} leaves the "
                         f"{'algorithm' if c.algo is None else 'protocol'} to NCCL; the example plugin "
                         "needs both, so this band has no line (use its env lines)")
            continue
        lo, hi = s["range"]
        body.append(",".join(str(x) for x in (
            nccl_rules.PLUGIN_COLLECTIVE[result.collective], lo, hi, nccl_rules.PLUGIN_ALGORITHM[c.algo],
            nccl_rules.PLUGIN_PROTOCOL[c.proto], c.ctas or 0, result.nnodes, result.nranks)))
    if not body:
        head.append("# no band beat NCCL's default by more than the measured noise: no lines")
    return "\n".join(head + body) + "\n", notes


def report_lines(result: TuneResult) -> list[str]:
    """The human-readable summary printed at the end of a tune."""
    out = [f"# ncclbench tune {result.collective}: {result.library}, {result.nranks} ranks on "
           f"{result.nnodes} node(s), {result.datatype} {result.op}",
           f"# {len(result.candidates) - 1} candidates + default, {result.rounds} interleaved rounds per "
           f"size, {result.iters_per_round} timed iterations per round, out-of-place; wall time "
           f"{result.wall_s:.1f} s"]
    for note in result.notes:
        out.append(f"# {note}")
    by_reason: dict[str, list[str]] = {}
    for s in result.skipped:
        by_reason.setdefault(s.reason, []).append(s.label)
    for reason, labels in by_reason.items():
        out.append(f"# skipped {', '.join(labels)}: {reason}")
    for d in result.dropped:
        out.append(f"# dropped {d.label}: {d.reason}")
    na: dict[tuple[str, str], list[int]] = {}
    for n in result.not_applicable:
        na.setdefault((n.label, n.reason), []).append(n.size)
    for (label, reason), sizes in na.items():
        out.append(f"# {label} not measured at {', '.join(human_size(s) for s in sorted(sizes))}: {reason}")
    out.append("#")
    out.append(f"# {'size':>10} {'default us':>11} {'best':>26} {'best us':>10} {'gain':>8} "
               f"{'noise':>7} {'wins':>5} {'p':>6}  verdict")
    for v in result.verdicts():
        p = f"{v.p:6.3f}" if v.best != "default" else f"{'-':>6}"
        out.append(f"# {human_size(v.size):>10} {v.default_us:11.2f} {v.best:>26} {v.best_us:10.2f} "
                   f"{pct(v.gain):>8} {v.noise * 100:6.1f}% {v.wins:>2}/{v.rounds:<2} {p}  {v.reason}")
    out.append("# (noise: the larger robust run-to-run spread of default and best; wins: paired rounds won, "
               "p: sign test; a gain counts when gain > noise and p <= 0.05)")
    out.append("#")
    out.append("# per size band:")
    for band in band_settings(result):
        span = f"{human_size(band['lo'])} .. {human_size(band['hi'])}"
        if band["winner"] == "default":
            out.append(f"#   {span:<22} keep the default (nothing beat it beyond the noise)")
        else:
            out.append(f"#   {span:<22} {band['winner']}: median gain {pct(band['median_gain'])}, "
                       f"least {pct(band['min_gain'])} over {len(band['sizes'])} size(s); "
                       + (" ".join(band["env"]) or "(ncclConfig_t only)"))
    return out


def result_json(result: TuneResult) -> dict[str, Any]:
    """The result with its judgement, for the -J-like JSON file."""
    doc = result.to_json()
    doc["verdicts"] = [vars(v) | {"winner": v.winner, "reason": v.reason} for v in result.verdicts()]
    doc["bands"] = band_settings(result)
    text, notes = tuner_config(result)
    doc["tuner_config"] = text or None
    doc["tuner_config_notes"] = notes
    return doc

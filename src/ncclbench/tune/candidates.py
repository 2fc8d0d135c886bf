"""The settings `ncclbench tune` measures against the library's default.

A `Candidate` is what is set for one measurement: environment variables
(read by NCCL at communicator init, or MPICH control variables written
through MPI_T), `ncclConfig_t` fields, and the labels a person reads.  The
default candidate sets nothing: the library chooses, as in a plain run.

Names come from the user (`--algos ring,tree --protos LL,Simple --ctas 8`):
a typo is an error naming what the library knows; a name the loaded
version lacks, or a combination the library never runs, is skipped with
the library's reason (nccl_rules.py, from NCCL's source; MPICH's own cvar
description).  Pure functions: no library is loaded here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import ArgumentError, UnsupportedError
from ..nccl.version_text import version_text
from . import nccl_rules
from .mpich import algorithm_cvar

AUTO = "auto"  # in --algos/--protos: leave this axis to the library
CONFIG_ENV = {"minCTAs": "NCCL_MIN_CTAS", "maxCTAs": "NCCL_MAX_CTAS"}  # NCCL_PARAMs since 2.17


@dataclass(frozen=True)
class Candidate:
    """One setting to measure.  `env` pairs are applied in order."""

    label: str
    env: tuple[tuple[str, str], ...] = ()
    config: tuple[tuple[str, int], ...] = ()  # ncclConfig_t field -> value
    algo: str | None = None
    proto: str | None = None
    ctas: int | None = None

    @property
    def is_default(self) -> bool:
        return not self.env and not self.config

    def process_env(self) -> tuple[tuple[str, str], ...]:
        """The variables that select this candidate for a whole process (a new
        job): `env`, plus the NCCL_PARAM variables that set the same
        ncclConfig_t fields (read once per process, at the first init, and
        then override every communicator's config: src/init.cc envConfigOverride)."""
        return self.env + tuple((CONFIG_ENV[k], str(v)) for k, v in self.config if k in CONFIG_ENV)

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "env": dict(self.env), "config": dict(self.config),
                "algo": self.algo, "proto": self.proto, "ctas": self.ctas}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Candidate:
        return cls(d["label"], tuple(d.get("env", {}).items()), tuple(d.get("config", {}).items()),
                   d.get("algo"), d.get("proto"), d.get("ctas"))


DEFAULT = Candidate("default")


@dataclass(frozen=True)
class Skipped:
    label: str
    reason: str


@dataclass
class CandidateSet:
    """The default first, then every candidate to measure; what was left out and why."""

    candidates: list[Candidate]
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        return [c.label for c in self.candidates]


def split_names(text: str | None, option: str) -> list[str] | None:
    """'a,b, c' -> ['a', 'b', 'c']; None stays None (option not given)."""
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ArgumentError(f"{option} needs at least one name")
    return names


def parse_ctas(text: str | None) -> list[int] | None:
    names = split_names(text, "--ctas")
    if names is None:
        return None
    out = []
    for n in names:
        if not n.isdigit() or int(n) < 1:
            raise ArgumentError(f"invalid value '{n}' for '--ctas': need CTA (channel) counts >= 1, e.g. --ctas 4,8,16")
        out.append(int(n))
    return out


# -- NCCL ----------------------------------------------------------------------------------

def _nccl_names(names: list[str] | None, canon: Callable[[str], str | None], known: list[str], option: str,
                what: str, version_code: int) -> list[str | None]:
    """Canonical names (None = AUTO); a spelling no NCCL release knows is an
    ArgumentError listing what this release knows.  Not given: all of `known`."""
    if names is None:
        return list(known)
    out: list[str | None] = []
    for n in names:
        if n.lower() == AUTO:
            out.append(None)
            continue
        c = canon(n)
        if c is None:
            raise ArgumentError(f"unknown NCCL {what} '{n}' for '{option}'; NCCL "
                                f"{version_text(version_code)} knows: {', '.join(known)} (or {AUTO})")
        if c not in out:
            out.append(c)
    return out


def nccl_candidates(collective: str, version_code: int, algos: list[str] | None = None,
                    protos: list[str] | None = None, ctas: list[int] | None = None,
                    nnodes: int | None = None) -> CandidateSet:
    """algorithm x protocol x CTA count for `collective` on NCCL `version_code`.

    An axis the user did not name covers every value the library knows
    (`ctas`: NCCL's own channel count); `auto` in a list keeps NCCL's choice
    on that axis.  Raises UnsupportedError for a collective NCCL offers no
    choice for, and when nothing is left to measure."""
    reason = nccl_rules.function_reason(collective)
    if reason is not None:
        raise UnsupportedError(reason)
    algo_list = _nccl_names(algos, nccl_rules.canonical_algorithm, nccl_rules.algorithms(version_code),
                            "--algos", "algorithm", version_code)
    proto_list = _nccl_names(protos, nccl_rules.canonical_protocol, list(nccl_rules.PROTOCOLS), "--protos",
                             "protocol", version_code)
    cta_list: list[int | None] = list(ctas) if ctas else [None]
    out = CandidateSet([DEFAULT])
    if ctas and version_code < nccl_rules.CTA_FIELDS_SINCE:
        out.skipped.append(Skipped(f"ctas={','.join(map(str, ctas))}",
                                   f"ncclConfig_t.minCTAs/maxCTAs need NCCL >= 2.17 "
                                   f"(library is {version_text(version_code)})"))
        cta_list = [None]
    for algo in algo_list:
        for proto in proto_list:
            for cta in cta_list:
                label = "/".join([algo or AUTO, proto or AUTO] + ([f"ctas={cta}"] if cta else []))
                if algo is None and proto is None and cta is None:
                    continue  # that is the default
                why = None
                if algo is not None:  # with proto auto, NCCL picks one this algorithm runs
                    why = nccl_rules.combination_reason(collective, algo, proto or "Simple", version_code, nnodes)
                if why is not None:
                    out.skipped.append(Skipped(label, why))
                    continue
                env: list[tuple[str, str]] = []
                if algo is not None:
                    env.append(("NCCL_ALGO", nccl_rules.env_value(collective, algo, version_code)))
                if proto is not None:
                    env.append(("NCCL_PROTO", nccl_rules.env_value(collective, proto, version_code)))
                config = (("minCTAs", cta), ("maxCTAs", cta)) if cta else ()
                out.candidates.append(Candidate(label, tuple(env), config, algo, proto, cta))
    if len(out.candidates) == 1:
        raise UnsupportedError("nothing to tune: " + ("; ".join(f"{s.label}: {s.reason}" for s in out.skipped)
                                                      or "no candidate besides the default"))
    return out


# -- MPICH ---------------------------------------------------------------------------------

def mpich_candidates(collective: str, choices: dict[str, int], algos: list[str] | None = None,
                     default_choice: str = AUTO) -> CandidateSet:
    """One candidate per MPICH algorithm choice of `collective`'s cvar.

    `choices` is MPICH's own list (mpich.cvar_choices); the default choice
    ('auto': MPICH's internal selection) is the default candidate."""
    cvar = algorithm_cvar(collective)
    if cvar is None:
        raise UnsupportedError(f"the CPU backend runs {collective} as point-to-point messages: "
                               "MPICH has no collective algorithm to choose for it")
    if not choices:
        raise UnsupportedError(f"this MPI has no control variable {cvar} (tuning the CPU backend needs MPICH)")
    names = [n for n in choices if n != default_choice]
    if algos is not None:
        picked = []
        for a in algos:
            if a not in choices:
                raise ArgumentError(f"unknown MPICH algorithm '{a}' for '--algos'; {cvar} knows: "
                                    + ", ".join(names))
            if a != default_choice and a not in picked:
                picked.append(a)
        names = picked
    if not names:
        raise UnsupportedError(f"nothing to tune: only MPICH's default ({default_choice}) was named")
    return CandidateSet([DEFAULT] + [Candidate(n, ((cvar, n),), algo=n) for n in names])


# -- the user's own settings -----------------------------------------------------------------

def preset_conflicts(environ: dict[str, str], names: list[str]) -> list[str]:
    """One line per variable the user already set that tune itself varies:
    with it set, 'default' would not be the library's default."""
    return [f"{n}={environ[n]} is set in the environment; tune measures the library's default against "
            f"each candidate, so unset {n} first" for n in names if n in environ]

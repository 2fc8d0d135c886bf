"""nccl-tests-compatible command-line parsing (docs/behaviour.md §1).

Scripts written for nccl-tests must keep working unchanged, so this module
reproduces its parser's quirks: GNU ``getopt_long`` (attached or separate
values, ``--name=value``, unique long prefixes, in-order processing, repeats
overwrite, non-options ignored, ``--`` ends options), C ``strtol`` base 0 for
integers (``010`` is octal, junk ignored, words read as 0) and the ``sscanf``
based size syntax.  Where nccl-tests hangs or silently misbehaves (``-b 0``,
``-z 7``, a typo in ``-d``) we refuse with an `ArgumentError` (exit 255)
instead; the few downgrade warnings nccl-tests prints are printed the same way
on stderr and parsing continues.

Public API: `parse_bench_args`, `usage_text`, `strtol`, `parse_size`,
`HelpRequested`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
import sys
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .. import collectives
from ..core.config import BACKEND_CHOICES, GATE_ROUNDS, GATE_ROUNDS_MAX, Average, BenchOptions, Blocking
from ..core.datatypes import DATATYPES, REDOPS
from ..core.errors import ArgumentError
from ..launch.affinity import CPU_BIND_CHOICES

__all__ = ["HelpRequested", "parse_bench_args", "usage_text", "strtol", "parse_size", "did_you_mean",
           "split_leading_options"]

TRAP_LEVELS = ("error", "warn")  # --fail-on-trap: the trap severities (explain/traps.py) that fail a run

_C_SPACE = " \t\n\v\f\r"  # C isspace() in the "C" locale
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1  # strtol saturates here (LP64)
_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1  # nccl-tests stores most values in an int


class HelpRequested(Exception):
    """`-h`, an unknown option or a missing argument: print `text` to stdout and exit.

    Not a `BenchError` because it is not a failure: nccl-tests exits 0 here.
    """

    def __init__(self, text: str, exit_code: int = 0):
        super().__init__(text)
        self.text = text
        self.exit_code = exit_code


# ----------------------------------------------------------------------------- numbers

_DIGITS = {8: "01234567", 10: "0123456789", 16: "0123456789abcdefABCDEF"}


def strtol(text: str) -> int:
    """C ``strtol(text, NULL, 0)`` on LP64: the value of the longest numeric prefix.

    Leading whitespace and one sign are accepted; ``0x``/``0X`` followed by a hex
    digit selects hex, any other leading ``0`` octal; parsing stops at the first
    character that is not a digit of the base (``"09"`` is 0, ``"12abc"`` 12);
    no digits at all gives 0; out-of-range values saturate at LONG_MIN/LONG_MAX.
    """
    s = text.lstrip(_C_SPACE)
    i = 0
    negative = False
    if s[:1] in ("+", "-"):
        negative = s[0] == "-"
        i = 1
    base = 10
    if s[i : i + 2] in ("0x", "0X") and s[i + 2 : i + 3] and s[i + 2] in _DIGITS[16]:
        base, i = 16, i + 2
    elif s[i : i + 1] == "0":
        base = 8
    j = i
    while j < len(s) and s[j] in _DIGITS[base]:
        j += 1
    value = int(s[i:j], base) if j > i else 0
    if negative:
        value = -value
    return max(_LONG_MIN, min(_LONG_MAX, value))


# What glibc's sscanf("%lf") consumes: a decimal or hex float whose exponent
# marker may lack digits ("1e" reads as 1, "1eK" as 1 KiB), or inf/nan.
_C_DOUBLE = re.compile(
    r"""(?P<sign>[+-]?)(?:
        0x(?P<hex>[0-9a-f]+\.?[0-9a-f]*|\.[0-9a-f]+)(?:p(?P<hexp>[+-]?[0-9]*))?
      | (?P<dec>[0-9]+\.?[0-9]*|\.[0-9]+)(?:e(?P<dexp>[+-]?[0-9]*))?
      | (?P<inf>inf(?:inity)?)
      | (?P<nan>nan)
    )""",
    re.X | re.I,
)
_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3}


def _c_double(m: re.Match[str]) -> float:
    def exponent(marker: str, digits: str | None) -> str:
        return marker + digits if digits and digits.lstrip("+-") else ""

    if m["hex"] is not None:
        value = float.fromhex("0x" + m["hex"] + exponent("p", m["hexp"]))
    elif m["dec"] is not None:
        value = float(m["dec"] + exponent("e", m["dexp"]))
    else:
        value = math.inf if m["inf"] else math.nan
    return -value if m["sign"] == "-" else value


def parse_size(text: str, name: str) -> int:
    """A byte count as nccl-tests' ``sscanf("%lf %1s")`` reads it (§1.3).

    A C float, optional whitespace, then optionally one suffix letter K/M/G
    (binary, any case; whatever follows it is ignored); the product is
    truncated (``1.5K`` = 1536, ``0.5`` = 0).  Any other suffix, a negative
    number, or (where C is undefined) inf/nan/>= 2**64 raises
    ``ArgumentError("invalid size specified for '<name>'")``.
    """
    error = ArgumentError(f"invalid size specified for '{name}'")
    s = text.lstrip(_C_SPACE)
    m = _C_DOUBLE.match(s)
    if m is None:
        raise error
    value = _c_double(m)
    rest = s[m.end() :].lstrip(_C_SPACE)
    if rest:
        unit = _UNITS.get(rest[0].lower())
        if unit is None:
            raise error
        value *= unit
    if math.isnan(value) or value < 0 or value >= 2.0**64:
        raise error
    return int(value)


# ----------------------------------------------------------------------------- option table


@dataclass(frozen=True)
class _Opt:
    long: str
    short: str | None  # None: ncclbench-only long option
    has_arg: bool = True


# nccl-tests' longopts, in its order, then ncclbench's own long-only options.
_OPTIONS: tuple[_Opt, ...] = (
    _Opt("nthreads", "t"), _Opt("ngpus", "g"), _Opt("minbytes", "b"), _Opt("maxbytes", "e"),
    _Opt("stepbytes", "i"), _Opt("stepfactor", "f"), _Opt("iters", "n"), _Opt("agg_iters", "m"),
    _Opt("warmup_iters", "w"), _Opt("run_cycles", "N"), _Opt("parallel_init", "p"),
    _Opt("check", "c"), _Opt("op", "o"), _Opt("datatype", "d"), _Opt("root", "r"),
    _Opt("blocking", "z"), _Opt("stream_null", "y"), _Opt("timeout", "T"),
    _Opt("cudagraph", "G"), _Opt("report_cputime", "C"), _Opt("report_timestamps", "S"),
    _Opt("output_file", "J"), _Opt("average", "a"), _Opt("local_register", "R"),
    _Opt("cta_policy", "x"), _Opt("device_implementation", "D"), _Opt("device_cta_count", "V"),
    _Opt("memory", "M"), _Opt("unalign", "u"), _Opt("per_iter_timing", "I"),
    _Opt("per_iter_skip", "K"), _Opt("help", "h", has_arg=False),
    _Opt("backend", None), _Opt("nprocs", None), _Opt("nccl-lib", None),
    _Opt("no-store", None, has_arg=False), _Opt("baseline", None), _Opt("cpu-bind", None),
    _Opt("no-explain", None, has_arg=False), _Opt("fail-on-trap", None),
    _Opt("metrics", None), _Opt("csv", None), _Opt("gate", None, has_arg=False), _Opt("gate-rounds", None),
)
_BY_SHORT = {o.short: o for o in _OPTIONS if o.short}
_BY_LONG = {o.long: o for o in _OPTIONS}

_USAGE_LINES = (
    "[-t,--nthreads <num threads>] ",
    "[-g,--ngpus <gpus per thread>] ",
    "[-b,--minbytes <min size in bytes>] ",
    "[-e,--maxbytes <max size in bytes>] ",
    "[-i,--stepbytes <increment size>] ",
    "[-f,--stepfactor <increment factor>] ",
    "[-n,--iters <iteration count>] ",
    "[-m,--agg_iters <aggregated iteration count>] ",
    "[-w,--warmup_iters <warmup iteration count>] ",
    "[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)] ",
    "[-p,--parallel_init <0/1>] ",
    "[-c,--check <check iteration count>] ",
    "[-o,--op <sum/prod/min/max/avg/mulsum/all>] ",
    "[-d,--datatype <nccltype/all>] ",
    "[-r,--root <root>] ",
    "[-z,--blocking <0/1/2/3> 1=barrier after each inner iter (-m), 2=no barrier, "
    "3=wait and barrier after each outer iter (-n)] ",
    "[-y,--stream_null <0/1>] ",
    "[-T,--timeout <time in seconds>] ",
    "[-G,--cudagraph <num graph launches>] ",
    "[-C,--report_cputime <0/1>] ",
    "[-S,--report_timestamps <0/1> report timestamps (default 0)] ",
    "[-J,--output_file <file> write output to filepath, if accessible. "
    "Infer type from suffix (only json supported presently.)] ",
    "[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>] ",
    "[-R,--local_register <0/1/2> enable local (1) or symmetric (2) buffer registration "
    "on send/recv buffers (default: disable (0))] ",
    "[-x,--cta_policy <0/1/2> set CTA policy (NCCL_CTA_POLICY_DEFAULT (0), "
    "NCCL_CTA_POLICY_EFFICIENCY (1), NCCL_CTA_POLICY_ZERO (2)) (default: do not set)] ",
    "[-D,--device_implementation <implementation number> enable device implementation "
    "(default: 0, use NCCL implementation; requires -R 2 if > 0)] ",
    "[-V,--device_cta_count <number> set number of CTAs for device implementation "
    "(default: 16)] ",
    "[-M,--memory <0/1> enable memory usage report (default: 0)] ",
    "[-u,--unalign <index of first element> Misalign source and destination buffers "
    "(default: 0)] ",
    "[-I,--per_iter_timing <0/1> per-iteration CUDA event timing",
    "    (best with -z 0, -z 2, or -z 3; with -z 1 includes barrier wait;",
    "    i_p99 uses nearest-rank percentile and may equal i_max",
    "    with <100 samples) (default: 0)] ",
    "[-K,--per_iter_skip <count> exclude leading samples from -I summary stats (default: 0)] ",
    "[-h,--help]",
)

_OWN_USAGE_LINES = (
    "[--backend <auto/nccl/mpi> GPUs through libnccl, or the CPU MPI backend (default: auto)] ",
    "[--nprocs <count> start this many local processes, no MPI launcher needed] ",
    "[--nccl-lib <path> libnccl.so to load (default: found automatically)] ",
    "[--no-store do not record this run in the result store] ",
    "[--baseline <name> compare results with a stored baseline] ",
    "[--cpu-bind <none/numa/core> run each process on its first GPU's NUMA-local CPU cores; core: its "
    "launching thread on one of them, one per local rank (default: none)] ",
    "[--no-explain do not judge the run: no topology, NCCL path, ceiling or trap lines (or NCCLBENCH_EXPLAIN=0)] ",
    "[--fail-on-trap <error/warn> exit 7 when a trap of that severity or worse is found] ",
    "[--metrics <file> write Prometheus text metrics (node_exporter textfile collector: *.prom)] ",
    "[--csv <file> write the table as CSV] ",
    f"[--gate measure for the regression gate: after the table, the sizes <= 64 KiB again in {GATE_ROUNDS} rounds, "
    "each on a fresh communicator, their median the gate's latency figure (implied by --baseline)] ",
    "[--gate-rounds <count> rounds of --gate (0: none, also with --baseline)] ",
)


_EXIT_STATUS_LINES = (
    "0 ok (also after -h, an unknown option or a missing value: nccl-tests prints this text and exits 0;",
    "  a mistake in one of ncclbench's own options is one line, 'did you mean', and 255)",
    "1 internal error, 2 CUDA error, 3 NCCL error, 4 timeout (-T; a rank that stopped answering)",
    "5 not supported here, 6 invalid usage (the launch: ranks, GPUs, MPI), 7 wrong results,",
    "  NCCL_TESTS_MIN_BW missed, --baseline regression or a trap with --fail-on-trap,",
    "  9 --baseline not judged (this run far noisier than the baseline: re-run),",
    "  255 a bad option value (-d nosuchtype)",
    "128+N ended by signal N (129 SIGHUP, 130 SIGINT, 143 SIGTERM): every rank is ended, the run kept",
)


def usage_text(program: str) -> str:
    """nccl-tests 2.19.6's usage block for `program` (basename shown), then ncclbench's
    options and its exit statuses."""
    base = program.replace("\\", "/").rsplit("/", 1)[-1]
    text = f"USAGE: {base} \n\t" + "\n\t".join(_USAGE_LINES) + "\n"
    text += "ncclbench options: \n\t" + "\n\t".join(_OWN_USAGE_LINES) + "\n"
    return text + "exit status: \n\t" + "\n\t".join(_EXIT_STATUS_LINES) + "\n"


# ----------------------------------------------------------------------------- getopt_long


class _GetoptError(Exception):
    """getopt_long returned '?': the message is its stderr line."""


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate closest to a mistyped `word` (difflib's ratio >= 0.75), or None."""
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.75)
    return close[0] if close else None


def _match_long(prog: str, body: str, name: str) -> _Opt:
    """glibc rules: an exact name wins, else a unique prefix; several prefixes are ambiguous.

    A name nothing matches that is closest to one of ncclbench's own options is
    a typo of ours: one line with the likely option and exit 255 (no script
    written for nccl-tests depends on it).  Anything else keeps nccl-tests'
    answer, its usage and exit 0."""
    if name in _BY_LONG:
        return _BY_LONG[name]
    found = [o for o in _OPTIONS if o.long.startswith(name)]
    if len(found) == 1:
        return found[0]
    if not found:
        guess = did_you_mean(name, _BY_LONG)
        if guess is not None and _BY_LONG[guess].short is None:
            raise ArgumentError(f"unrecognized option '--{body}'; did you mean '--{guess}'?")
        raise _GetoptError(f"{prog}: unrecognized option '--{body}'")
    choices = "".join(f" '--{o.long}'" for o in found)
    raise _GetoptError(f"{prog}: option '--{body}' is ambiguous; possibilities:{choices}")


def _long_option(prog: str, arg: str, args: list[str], i: int) -> tuple[_Opt, str | None, int]:
    """`--name`, `--name=value` or `--name value` (args[i] is the word after `arg`): (the option,
    its value, the index of the next word).  A mistake in one of ncclbench's own options is one
    line and exit 255, not the usage."""
    body = arg[2:]
    name, eq, value = body.partition("=")
    opt = _match_long(prog, body, name)
    own = opt.short is None
    if not opt.has_arg:
        if eq:
            if own:
                raise ArgumentError(f"option '--{opt.long}' takes no value (got '{arg}')")
            raise _GetoptError(f"{prog}: option '--{opt.long}' doesn't allow an argument")
        return opt, None, i
    if eq:
        return opt, value, i
    if i < len(args):
        return opt, args[i], i + 1
    if own:
        raise ArgumentError(f"option '--{opt.long}' needs a value")
    raise _GetoptError(f"{prog}: option '--{opt.long}' requires an argument")


def _short_options(prog: str, arg: str, args: list[str], i: int) -> Generator[tuple[_Opt, str | None], None, int]:
    """The options of one `-abc` word, lazily; an option's value is the rest of the word or the next
    word (args[i]).  Returns the index of the next word."""
    j = 1
    while j < len(arg):
        ch = arg[j]
        j += 1
        opt = _BY_SHORT.get(ch)
        if opt is None:
            raise _GetoptError(f"{prog}: invalid option -- '{ch}'")
        if not opt.has_arg:
            yield opt, None
        elif j < len(arg):
            yield opt, arg[j:]
            break
        elif i < len(args):
            i += 1
            yield opt, args[i - 1]
        else:
            raise _GetoptError(f"{prog}: option requires an argument -- '{ch}'")
    return i


def _getopt(prog: str, args: list[str]) -> Iterator[tuple[_Opt, str | None]]:
    """GNU getopt_long over `args` (argv without argv[0]), lazily, in command-line order.

    Raises `_GetoptError` when getopt would return '?' — only once the
    options before the bad one have been consumed, as nccl-tests sees them.
    """
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if arg == "--":
            return
        if arg.startswith("--"):
            opt, value, i = _long_option(prog, arg, args, i)
            yield opt, value
        elif arg.startswith("-") and len(arg) > 1:
            i = yield from _short_options(prog, arg, args, i)
        # anything else is a non-option argument: ignored, scanning goes on


# ----------------------------------------------------------------------------- parsing


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


def _c_int(opt: _Opt, text: str) -> int:
    """strtol into an int-sized variable; values C would wrap are refused, not wrapped."""
    value = strtol(text)
    if not _INT_MIN <= value <= _INT_MAX:
        raise ArgumentError(f"value out of range for '{opt.long}': {text}")
    return value


def _choose(kind: str, value: str, table: list[str]) -> tuple[str, ...]:
    if value == "all":
        return tuple(table)
    if value in table:
        return (value,)
    raise ArgumentError(f"invalid {kind} '{value}'; valid: {', '.join(table)}, all")


def _display_name(program: str, name: str) -> str:
    """What nccl-tests would show as its basename: the binary typed, else `<name>_perf`."""
    base = program.replace("\\", "/").rsplit("/", 1)[-1]
    return base if base != name else f"{name}_perf"


# Integer options that map straight onto a BenchOptions field; booleans are any non-zero.
_INT_FIELDS = {
    "t": "nthreads", "g": "ngpus", "n": "iters", "m": "agg_iters", "w": "warmup_iters",
    "N": "run_cycles", "c": "check", "r": "root", "z": "blocking", "T": "timeout",
    "G": "cudagraph", "a": "average", "R": "local_register", "D": "device_implementation",
    "u": "unalign",
}
_BOOL_FIELDS = {
    "p": "parallel_init", "y": "stream_null", "C": "report_cputime", "S": "report_timestamps",
    "M": "memory_report",
}
_SIZE_FIELDS = {"b": ("min_bytes", "minbytes"), "e": ("max_bytes", "maxbytes"),
                "i": ("step_bytes", "stepBytes")}


def _collective_of(program: str) -> collectives.Collective:
    """The collective `program` names; an unknown one is refused with the nearest name."""
    coll = collectives.lookup(program)
    if coll is None:
        valid = ", ".join(collectives.COLLECTIVES)
        guess = did_you_mean(program.replace("\\", "/").rsplit("/", 1)[-1].lower(),
                             [*collectives.COLLECTIVES, *(f"{c}_perf" for c in collectives.COLLECTIVES)])
        hint = f" (did you mean '{guess}'?)" if guess else ""
        raise ArgumentError(f"unknown collective '{program}'{hint}; valid: {valid}")
    return coll


def _read_option(values: dict[str, Any], later: dict[str, int], opt: _Opt, key: str, value: str) -> None:
    """One option into `values`, or into `later` (-f, -I, -K: BenchOptions gets them after the
    checks and downgrades)."""
    if key in _INT_FIELDS:
        values[_INT_FIELDS[key]] = _c_int(opt, value)
    elif key in _BOOL_FIELDS:
        values[_BOOL_FIELDS[key]] = strtol(value) != 0
    elif key in _SIZE_FIELDS:
        field, label = _SIZE_FIELDS[key]
        values[field] = parse_size(value, label)
    elif key == "f":
        later["step_factor"] = strtol(value)  # size_t in nccl-tests: `-f 1.5` is 1
    elif key == "I":
        later["per_iter_timing"] = _c_int(opt, value)
    elif key == "K":
        later["per_iter_skip"] = _c_int(opt, value)
    else:
        _read_named_option(values, opt, key, value)


def _read_named_option(values: dict[str, Any], opt: _Opt, key: str, value: str) -> None:
    """The options with a value of their own kind: -o, -d, -J, -x, -V, then ncclbench's own."""
    if key == "o":
        values["ops"] = _choose("op", value, [o.name for o in REDOPS])
        values["op_arg"] = value
    elif key == "d":
        values["datatypes"] = _choose("datatype", value, [d.name for d in DATATYPES])
        values["datatype_arg"] = value
    elif key == "J":
        values["output_file"] = value
    elif key == "x":
        policy = _c_int(opt, value)
        values["cta_policy"] = policy if policy >= 0 else None  # nccl-tests: < 0 = unset
    elif key == "V":
        count = _c_int(opt, value)
        if count <= 0 or count > 128:
            _warn(f"device_cta_count (-V) must be positive and less than 128, got {count}. "
                  "Using default value 16.")
            count = 16
        values["device_cta_count"] = count
    else:
        _parse_own(values, key, value)


def parse_bench_args(program: str, args: list[str]) -> BenchOptions:
    """Parse an nccl-tests command line for the collective named by `program`.

    `program` is what the user typed (`all_reduce_perf`, `all_reduce`,
    `/opt/bin/all_reduce_perf_mpi`); `args` the options after it.  Raises
    `ArgumentError` (exit 255) for bad values and `HelpRequested` (exit 0)
    where nccl-tests prints its usage; prints nccl-tests' downgrade warnings
    on stderr and returns the (frozen) configuration with the downgraded values.
    Every check of a value, alone or with others, happens here and only here.
    """
    coll = _collective_of(program)
    values: dict[str, Any] = {"collective": coll.name, "program": f"{coll.name}_perf",
                              "argv": (f"{coll.name}_perf", *args)}
    later = {"per_iter_timing": 0, "per_iter_skip": 0, "step_factor": 1}
    try:
        for opt, optarg in _getopt(program, args):
            key = opt.short or opt.long
            if key == "h":
                raise HelpRequested(usage_text(_display_name(program, coll.name)))
            _read_option(values, later, opt, key, "" if optarg is None else optarg)  # None: no argument
    except _GetoptError as exc:
        _warn(str(exc))
        usage = usage_text(_display_name(program, coll.name))
        raise HelpRequested("invalid option '?'\n" + usage) from None
    if values.get("baseline") and "gate_rounds" not in values:  # a run checked against a baseline is gated
        values["gate_rounds"] = GATE_ROUNDS
    opts = BenchOptions(**values, step_factor=later["step_factor"])
    _validate(opts)
    opts = _downgrade(opts, later["per_iter_timing"], later["per_iter_skip"])
    _validate_combinations(opts)
    return opts


def split_leading_options(argv: list[str]) -> tuple[str, list[str]] | None:
    """`ncclbench --nprocs 8 all_reduce_perf -b 8` -> ('all_reduce_perf', ['--nprocs', '8', '-b', '8']):
    options may come before the collective (docs/torchrun.md writes them there).
    The collective is the first word that is not an option or an option's value;
    None when there is none, or it names no collective."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        if arg.startswith("--"):
            name = arg[2:].partition("=")[0]
            found = [o for o in _OPTIONS if o.long == name] or [o for o in _OPTIONS if o.long.startswith(name)]
            takes = len(found) == 1 and found[0].has_arg and "=" not in arg
        else:
            opt = _BY_SHORT.get(arg[1:2])
            takes = opt is not None and opt.has_arg and len(arg) == 2
        i += 2 if takes else 1
    if i >= len(argv) or argv[i] == "--" or collectives.lookup(argv[i]) is None:
        return None
    return argv[i], argv[:i] + argv[i + 1:]


def _own_choice(values: dict[str, Any], key: str, value: str) -> bool:
    """--fail-on-trap, --backend, --cpu-bind: one of their choices.  False: not one of these."""
    if key == "fail-on-trap":
        if value not in TRAP_LEVELS:
            raise ArgumentError(f"invalid value '{value}' for '--fail-on-trap'; valid: {', '.join(TRAP_LEVELS)}")
        values["fail_on_trap"] = value
    elif key == "backend":
        if value not in BACKEND_CHOICES:
            raise ArgumentError(
                f"invalid backend '{value}' for '--backend'; valid: {', '.join(BACKEND_CHOICES)}")
        values["backend"] = value
    elif key == "cpu-bind":
        if value not in CPU_BIND_CHOICES:
            raise ArgumentError(f"invalid value '{value}' for '--cpu-bind'; valid: {', '.join(CPU_BIND_CHOICES)}")
        values["cpu_bind"] = value
    else:
        return False
    return True


def _own_count(values: dict[str, Any], key: str, value: str) -> bool:
    """--nprocs, --gate, --gate-rounds: plain decimal counts in their range.  False: not one of these."""
    if key == "nprocs":
        text = value.strip()
        if not (text.isascii() and text.isdigit()) or int(text) < 1:
            raise ArgumentError(f"invalid value for '--nprocs': '{value}' (need an integer >= 1)")
        values["nprocs"] = int(text)
    elif key == "gate":
        values.setdefault("gate_rounds", GATE_ROUNDS)
    elif key == "gate-rounds":
        text = value.strip()
        if not (text.isascii() and text.isdigit()) or int(text) > GATE_ROUNDS_MAX:
            raise ArgumentError(f"invalid value for '--gate-rounds': '{value}' (need an integer from 0 to "
                                f"{GATE_ROUNDS_MAX})")
        values["gate_rounds"] = int(text)
    else:
        return False
    return True


def _parse_own(values: dict[str, Any], key: str, value: str) -> None:
    """ncclbench's long-only options: strict, since no existing script depends on quirks."""
    if key == "no-store":
        values["store"] = False
    elif key == "no-explain":
        values["explain"] = False
    elif _own_choice(values, key, value) or _own_count(values, key, value):
        pass
    elif key in ("nccl-lib", "baseline", "metrics", "csv"):
        if not value:
            raise ArgumentError(f"'--{key}' needs a non-empty value")
        values[{"nccl-lib": "nccl_lib", "metrics": "metrics_file", "csv": "csv_file"}.get(key, key)] = value


def _validate(opts: BenchOptions) -> None:
    """nccl-tests' post-parse errors (§1.5.1-2), then ours where nccl-tests hangs or misbehaves."""
    if opts.min_bytes > opts.max_bytes:
        raise ArgumentError(
            f"invalid sizes for 'minbytes' and 'maxbytes': {opts.min_bytes} > {opts.max_bytes}")
    if opts.device_implementation > 0 and opts.local_register != 2:
        raise ArgumentError("device implementation (-D > 0) requires enabling symmetric memory "
                            "registration (-R 2)")
    if opts.min_bytes == 0:
        raise ArgumentError("invalid size specified for 'minbytes': 0 (the warm-up sweep doubles "
                            "from it and would never end); use at least 1")
    if opts.step_factor < 0:
        raise ArgumentError(f"invalid step factor (-f {opts.step_factor}): must not be negative")
    if opts.step_factor <= 1 and opts.step_bytes == 0:
        raise ArgumentError("invalid size specified for 'stepBytes': 0 with no step factor (-f) "
                            "would repeat the first size forever")
    checks = (
        (opts.nthreads >= 1, f"invalid number of threads (-t {opts.nthreads}): must be at least 1"),
        (opts.ngpus >= 1,
         f"invalid number of GPUs per thread (-g {opts.ngpus}): must be at least 1"),
        (opts.iters >= 0, f"invalid iteration count (-n {opts.iters}): must not be negative"),
        (opts.warmup_iters >= 0,
         f"invalid warm-up iteration count (-w {opts.warmup_iters}): must not be negative"),
        (opts.agg_iters >= 1,
         f"invalid aggregated iteration count (-m {opts.agg_iters}): must be at least 1"),
        (opts.run_cycles >= 0,
         f"invalid cycle count (-N {opts.run_cycles}): must not be negative (0 runs forever)"),
        (opts.check >= 0, f"invalid check count (-c {opts.check}): must not be negative"),
        (opts.root >= -1, f"invalid root (-r {opts.root}): use a rank, or -1 for every root"),
        (opts.blocking in set(Blocking), f"invalid blocking mode (-z {opts.blocking}): valid: 0, 1, 2, 3"),
        (opts.timeout >= 0, f"invalid timeout (-T {opts.timeout}): must not be negative"),
        (opts.cudagraph >= 0,
         f"invalid number of graph launches (-G {opts.cudagraph}): must not be negative"),
        (opts.average in set(Average), f"invalid average mode (-a {opts.average}): valid: 0, 1, 2, 3"),
        (0 <= opts.local_register <= 2,
         f"invalid registration mode (-R {opts.local_register}): valid: 0, 1, 2"),
        (opts.device_implementation >= 0,
         f"invalid device implementation (-D {opts.device_implementation}): must not be negative"),
        (opts.unalign >= 0, f"invalid unalign (-u {opts.unalign}): must not be negative"),
    )
    for ok, message in checks:
        if not ok:
            raise ArgumentError(message)


def _validate_combinations(opts: BenchOptions) -> None:
    """Combinations nccl-tests accepts but crashes or hangs on (checked after its downgrades)."""
    if opts.cudagraph and opts.blocking in (Blocking.WAIT_BARRIER_EACH_OP, Blocking.WAIT_EACH_OP):
        raise ArgumentError(f"-z {opts.blocking} cannot be combined with CUDA graphs (-G): "
                            "a blocking wait inside stream capture is not permitted")


def _downgrade(opts: BenchOptions, per_iter_timing: int, per_iter_skip: int) -> BenchOptions:
    """§1.5.3-7: nccl-tests' warnings, in its order, each switching an option off."""
    blocking = opts.blocking
    if per_iter_timing not in (0, 1):
        _warn("per-iteration timing (-I) only supports 0=off or 1=on. Disabling.")
        per_iter_timing = 0
    if per_iter_timing and opts.cudagraph >= 1:
        _warn("per-iteration timing (-I) is incompatible with CUDA graph mode (-G). Disabling.")
        per_iter_timing = 0
    if blocking == 3 and opts.cudagraph >= 1:
        _warn("blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.")
        blocking = 0
    if per_iter_skip < 0 or per_iter_skip >= opts.iters:
        _warn(f"per-iteration skip (-K) must be between 0 and {opts.iters - 1}. Disabling.")
        per_iter_skip = 0
    if per_iter_skip and not per_iter_timing:
        _warn("per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.")
        per_iter_skip = 0
    return dataclasses.replace(opts, blocking=blocking, per_iter_timing=bool(per_iter_timing),
                               per_iter_skip=per_iter_skip)

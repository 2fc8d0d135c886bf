"""nccl-tests' `-J file.json` output, version-3 schema (docs/behaviour.md §6).

Downstream tools (nccl-tests' `analyze_perf_json.py`, dashboards) parse this
file, so the layout follows nccl-tests 2.19.6 byte for byte: one line, no
whitespace, `\\/` escapes, booleans as the strings "true"/"false", `root` as a
`%6i` string, doubles as `%lf`, keys in nccl-tests' order.

Differences from nccl-tests, all deliberate:

* `env` redacts the values of variables whose names contain TOKEN, SECRET,
  PASSWORD, PASSWD or CREDENTIAL, or end in `_KEY` (written `NAME=<redacted>`):
  JSON files get shared, and nccl-tests would embed credentials verbatim.
* An unwritable path is an error raised before the run starts
  (`ArgumentError`, exit 255) instead of nccl-tests' silent
  `# skipping json output`.
* Runs without NCCL (MPI backend) write `"nccl_version":0`.
* +/-infinity is written as the strings "inf"/"-inf" (nccl-tests writes bare
  `inf`, which is not JSON).
* Everything ncclbench adds lives under two extra top-level keys, written last
  (after `end_time`), with ordinary JSON (real booleans): `"ncclbench"` (the
  run's facts) and `"ncclbench_explain"` (`core.results.EXPLAIN_KEY`: topology, what
  NCCL did per size, ceiling, verdict, traps; absent with --no-explain).

The file is written incrementally and flushed after the header and after each
row, so a killed run keeps the rows it measured; `recover_json` reads such a
cut-off file back.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TextIO, TypeAlias, overload

from ncclbench import NCCL_TESTS_COMPAT_VERSION, __version__
from ncclbench.core.config import BenchOptions
from ncclbench.core.errors import ArgumentError, BenchError, ExitCode
from ncclbench.core.results import EXPLAIN_KEY, DeviceInfo, HalfResult, PerIterStats, ResultRow, RunInfo, RunSummary
from ncclbench.output.numfmt import now_string

JSON_FILE_VERSION = 3
STRING_LIMIT = 2048  # nccl-tests sanitises into a 2048-byte buffer
REDACTED = "<redacted>"
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL")
_ESCAPES = {0x22: b'\\"', 0x5C: b"\\\\", 0x2F: b"\\/", 0x09: b"\\t", 0x0A: b"\\n"}


# ---------------------------------------------------------------- encoding


def json_str(value: str | None) -> str:
    """A string the way nccl-tests writes it: escapes `" \\ / TAB LF`; a control
    character, DEL or any non-ASCII byte ends the string there; at most ~2047 bytes."""
    if value is None:
        return "null"
    raw = value.encode("utf-8", "surrogateescape")
    out = bytearray()
    for byte in raw:
        if len(out) + 1 >= STRING_LIMIT:
            break
        esc = _ESCAPES.get(byte)
        if esc is not None:
            if len(out) + 2 > STRING_LIMIT:
                break
            out += esc
        elif byte >= 0x7F or byte <= 0x1F:
            break
        else:
            out.append(byte)
    return '"' + out.decode("ascii") + '"'


def json_double(value: float) -> str:
    """`%lf` (6 decimals); NaN is the string "nan" as in nccl-tests."""
    value = float(value)
    if math.isnan(value):
        return '"nan"'
    if math.isinf(value):
        return '"inf"' if value > 0 else '"-inf"'
    return "%f" % value


def json_bool(value: bool) -> str:
    return '"true"' if value else '"false"'


def _list(items: Iterable[str]) -> str:
    return "[" + ",".join(items) + "]"


def _obj(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(json_str(k) + ":" + v for k, v in pairs) + "}"


def is_secret_name(name: str) -> bool:
    upper = name.upper()
    return upper.endswith("_KEY") or any(word in upper for word in _SECRET_WORDS)


def redact_env(entries: Iterable[str]) -> tuple[list[str], list[str]]:
    """(`NAME=value` list with secret values replaced, names that were redacted)."""
    out, redacted = [], []
    for entry in entries:
        name = entry.split("=", 1)[0]
        if is_secret_name(name):
            out.append(name + "=" + REDACTED)
            redacted.append(name)
        else:
            out.append(entry)
    return out, redacted


def _env_entries(env: Mapping[str, str] | Iterable[str] | None) -> list[str]:
    if env is None:
        env = os.environ
    if isinstance(env, Mapping):
        return ["%s=%s" % (k, v) for k, v in env.items()]
    return list(env)


# ---------------------------------------------------------------- pieces


def config_json(info: RunInfo, opts: BenchOptions) -> str:
    step = (
        ("step_factor", "%d" % opts.step_factor)
        if opts.step_factor > 1
        else ("step_bytes", "%d" % opts.step_bytes)
    )
    return _obj(
        [
            ("nthreads", "%d" % opts.nthreads),
            ("ngpus", "%d" % opts.ngpus),
            ("minimum_bytes", "%d" % opts.min_bytes),
            ("maximum_bytes", "%d" % opts.max_bytes),
            step,
            ("warmup_iters", "%d" % opts.warmup_iters),
            ("iterations", "%d" % opts.iters),
            ("aggregated_iterations", "%d" % opts.agg_iters),
            ("validation", "%d" % opts.check),
            ("graph", "%d" % opts.cudagraph),
            ("blocking_collectives", json_bool(opts.blocking != 0)),
            ("per_iter_timing", json_bool(opts.per_iter_timing)),
            ("per_iter_skip", "%d" % opts.per_iter_skip),
            ("parallel_init", json_bool(opts.parallel_init)),
            ("devices", _list(device_json(d) for d in first_device_per_process(info.devices))),
        ]
    )


def first_device_per_process(devices: Iterable[DeviceInfo]) -> list[DeviceInfo]:
    """nccl-tests' JSON keeps only the first device line of each process."""
    seen: dict[int, DeviceInfo] = {}
    for dev in devices:
        seen.setdefault(dev.process, dev)
    return [seen[p] for p in sorted(seen)]


def device_json(dev: DeviceInfo) -> str:
    return _obj(
        [
            ("rank", "%d" % dev.rank),
            ("group", "%d" % dev.group),
            ("pid", "%d" % dev.pid),
            ("hostname", json_str(dev.hostname)),
            ("device", "%d" % dev.device),
            ("device_hex", json_str(dev.device_hex)),
            ("device_info", json_str(dev.device_info)),
        ]
    )


def half_json(half: HalfResult, opts: BenchOptions) -> str:
    if opts.report_cputime:
        timing = ("cpu_time", json_double(half.cpu_time_us))
    else:
        timing = ("time", json_double(half.time_us))
    nwrong = "null" if half.wrong is None else json_double(float(half.wrong))
    return _obj(
        [
            timing,
            ("alg_bw", json_double(half.algbw)),
            ("bus_bw", json_double(half.busbw)),
            ("nwrong", nwrong),
        ]
    )


def per_iter_json(stats: PerIterStats) -> str:
    pairs = [
        ("skipped_iterations", "%d" % stats.skipped_iterations),
        ("min_us", json_double(stats.min_us)),
        ("max_us", json_double(stats.max_us)),
        ("avg_us", json_double(stats.avg_us)),
        ("p50_us", json_double(stats.p50_us)),
        ("p95_us", json_double(stats.p95_us)),
        ("p99_us", json_double(stats.p99_us)),
        ("stdev_us", json_double(stats.stdev_us)),
        ("cv_pct", json_double(stats.cv_pct)),
        ("times_us", _list(json_double(t) for t in stats.times_us)),
    ]
    rows = stats.per_process_max_times_us
    if rows is not None and len(rows) > 1:  # only with more than one world process
        pairs.append(
            ("per_process_max_times_us", _list(_list(json_double(t) for t in r) for r in rows))
        )
    return _obj(pairs)


def row_json(row: ResultRow, opts: BenchOptions) -> str:
    pairs = [
        ("size", "%d" % row.size),
        ("count", "%d" % row.count),
        ("type", json_str(row.type)),
        ("redop", json_str(row.redop)),
        ("root", json_str("%6i" % row.root)),
    ]
    for key, half in (("out_of_place", row.out_of_place), ("in_place", row.in_place)):
        pairs.append((key, half_json(half, opts)))
        if opts.per_iter_timing and half.per_iter is not None:
            pairs.append((key + "_per_iter", per_iter_json(half.per_iter)))
    pairs.append(("actual_iterations", "%d" % opts.iters))
    pairs.append(("experiment_name", json_str("")))
    return _obj(pairs)


def summary_json(summary: RunSummary) -> str:
    """`out_of_bounds`, `average_bus_bandwidth` and `errors` members (no braces)."""
    bw_ok = json_str("unchecked") if summary.gate_ok is None else json_bool(summary.gate_ok)
    oob = _obj([("count", "%d" % summary.out_of_bounds), ("okay", json_bool(summary.out_of_bounds == 0))])
    avg = _obj([("bandwidth", json_double(summary.avg_busbw)), ("okay", bw_ok)])
    errors = _list(json_str(e) for e in summary.errors)
    return '"out_of_bounds":%s,"average_bus_bandwidth":%s,"errors":%s' % (oob, avg, errors)


# What json.dumps writes: the values `_plain` turns everything into.
JsonValue: TypeAlias = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]


@overload
def _plain(value: Mapping[Any, object]) -> dict[str, JsonValue]: ...
@overload
def _plain(value: object) -> JsonValue: ...
def _plain(value: object) -> JsonValue:
    """Make RunInfo.extra & co. safe for strict JSON (finite floats, str for the unknown)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        as_dict: dict[str, object] = dataclasses.asdict(value)
        return _plain(as_dict)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


# ---------------------------------------------------------------- reporter


class JsonReporter:
    """Writes the -J file incrementally; see the module docstring for the format.

    The constructor creates the file (exclusively: an existing file is never
    overwritten, `<path>.0`, `<path>.1`, ... are tried instead, `self.path` is
    the one used) and raises `ArgumentError` when it cannot, so the CLI can
    fail before the run starts.  `env` (mapping or `NAME=value` list, default
    os.environ) and `clock` (returns `YYYY-MM-DD HH:MM:SS`) are injectable for
    tests.
    """

    def __init__(
        self,
        path: str,
        opts: BenchOptions,
        *,
        env: Mapping[str, str] | Iterable[str] | None = None,
        clock: Callable[[], str] | None = None,
    ):
        self.requested_path = path
        self.opts = opts
        self._clock = clock or now_string
        self._fp: TextIO | None
        self.path, self._fp = _create_exclusive(path)
        self._info: RunInfo | None = None
        self._summary: RunSummary | None = None
        self._state = "open"  # open -> results -> ended -> closed
        self._rows = 0
        self._timestamps: list[str | None] = []
        self.env, self.redacted = redact_env(_env_entries(env))
        self._write(
            '{"version":%d,"start_time":%s,"args":%s,"env":%s'
            % (
                JSON_FILE_VERSION,
                json_str(self._clock()),
                _list(json_str(a) for a in opts.argv),
                _list(json_str(e) for e in self.env),
            )
        )

    # -- Reporter protocol

    def begin(self, info: RunInfo, opts: BenchOptions) -> None:
        if self._state != "open":
            return
        self._info, self.opts = info, opts
        code = info.nccl_version_code if info.nccl_version_code is not None else 0
        self._write(',"nccl_version":%d,"config":%s,"results":[' % (code, config_json(info, opts)))
        self._state = "results"

    def message(self, line: str) -> None:
        """Stream messages have no place in nccl-tests' JSON."""

    def row(self, row: ResultRow) -> None:
        if self._state != "results":
            return
        self._write(("," if self._rows else "") + row_json(row, self.opts))
        self._rows += 1
        self._timestamps.append(row.timestamp)

    def end(self, summary: RunSummary) -> None:
        if self._state != "results":
            return
        self._summary = summary
        self._write("]," + summary_json(summary))
        self._state = "ended"

    def close(self) -> None:
        """Finish the document; safe to call twice and after an error mid-run.

        As in nccl-tests, `end_time` is only written when the run got to its
        footer (or never started its results); an interrupted run's file just
        has its open containers closed, plus the `ncclbench` key saying so.
        """
        if self._state == "closed" or self._fp is None:
            return
        tail = ""
        completed = self._state == "ended"
        if self._state == "results":
            tail += "]"
        else:
            tail += ',"end_time":' + json_str(self._clock())
        tail += ',"ncclbench":' + json.dumps(
            self._ncclbench(completed), separators=(",", ":"), ensure_ascii=True
        )
        explain = self._explain()
        if explain is not None:
            tail += ',"%s":' % EXPLAIN_KEY + json.dumps(explain, separators=(",", ":"), ensure_ascii=True)
        tail += "}"
        try:
            self._write(tail)
        finally:
            self._state = "closed"
            fp, self._fp = self._fp, None
            try:
                fp.close()
            except OSError:
                pass

    # -- helpers

    def _write(self, text: str) -> None:
        if self._fp is None:
            return
        try:
            self._fp.write(text)
            self._fp.flush()
        except OSError as exc:
            fp, self._fp = self._fp, None
            self._state = "closed"
            try:
                fp.close()
            except OSError:
                pass
            raise BenchError(
                "cannot write JSON output to %s: %s" % (self.path, exc.strerror or exc),
                ExitCode.INTERNAL,
            ) from None

    def _ncclbench(self, completed: bool) -> dict[str, JsonValue]:
        info, opts, summary = self._info, self.opts, self._summary
        out: dict[str, object] = {
            "version": __version__,
            "nccl_tests_compat": NCCL_TESTS_COMPAT_VERSION,
            "completed": completed,
            "json_path": self.path,
        }
        if info is not None:
            out.update(
                {
                    "program": info.program,
                    "backend": info.backend,
                    "library": info.library,
                    "nccl_version_code": info.nccl_version_code,
                    "nccl_headers_code": info.nccl_headers_code,
                    "world_size": info.world_size,
                    "nranks": info.nranks,
                    "ngroups": info.ngroups,
                    "hosts": list(info.hosts),
                    "devices": [dataclasses.asdict(d) for d in info.devices],
                    "notes": list(info.notes),
                }
            )
        out["options"] = {
            "collective": opts.collective,
            "datatypes": list(opts.datatypes),
            "ops": list(opts.ops),
            "root": opts.root,
            "average": opts.average,
            "blocking": opts.blocking,
            "blocking_collectives": opts.blocking != 0,
            "per_iter_timing": opts.per_iter_timing,
            "parallel_init": opts.parallel_init,
            "report_cputime": opts.report_cputime,
            "report_timestamps": opts.report_timestamps,
            "run_cycles": opts.run_cycles,
            "unalign": opts.unalign,
            "stream_null": opts.stream_null,
            "local_register": opts.local_register,
        }
        if opts.report_timestamps:
            out["row_timestamps"] = list(self._timestamps)
        if summary is not None:
            out["out_of_bounds_okay"] = summary.out_of_bounds == 0
            out["bandwidth_okay"] = summary.gate_ok
            if summary.memory_line:
                out["memory_line"] = summary.memory_line
            if summary.gate_latency:
                out["gate_latency"] = summary.gate_latency
        out["env_redacted"] = list(self.redacted)
        extra = {k: v for k, v in (info.recorded_extra() if info is not None else {}).items() if k != EXPLAIN_KEY}
        if extra:
            out["extra"] = extra
        return _plain(out)

    def _explain(self) -> dict[str, JsonValue] | None:
        """The judgement: what was known at start (RunInfo.extra) merged with what the end added."""
        start = self._info.extra.get(EXPLAIN_KEY) if self._info is not None else None
        end = self._summary.explain if self._summary is not None else None
        if start is None and end is None:
            return None
        merged: dict[str, object] = {**(start or {}), **(end or {})}
        return _plain(merged)


def _create_exclusive(path: str) -> tuple[str, TextIO]:
    """Create `path`, or `<path>.0`, `<path>.1`, ... if it exists (nccl-tests' probing)."""
    attempt, index = path, 0
    while True:
        try:
            return attempt, open(attempt, "x", encoding="ascii", newline="")
        except FileExistsError:
            attempt = "%s.%d" % (path, index)
            index += 1
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if exc.errno == errno.EISDIR:
                reason = "is a directory"
            raise ArgumentError("cannot write JSON output to %s: %s" % (attempt, reason)) from None


# ---------------------------------------------------------------- recovery

# bare tokens nccl-tests (printf "%lf") may write for non-finite doubles, as JSON reads them
_NONFINITE = {"inf": "Infinity", "+inf": "Infinity", "-inf": "-Infinity", "infinity": "Infinity",
              "+infinity": "Infinity", "-infinity": "-Infinity", "nan": "NaN", "+nan": "NaN",
              "-nan": "NaN"}
_CLOSE = {"{": "}", "[": "]"}


_Safe = tuple[int, list[tuple[str, int, bool]]]


def _string_end(text: str, i: int) -> int | None:
    """The offset after the string that opens at text[i], or None when the text ends inside it."""
    n = len(text)
    j = i + 1
    while j < n and text[j] != '"':
        j += 2 if text[j] == "\\" else 1
    return j + 1 if j < n else None


def _token_end(text: str, i: int) -> int:
    """The offset after the bare token (number, true/false/null, inf/nan) that starts at text[i]."""
    j, n = i, len(text)
    while j < n and (text[j].isalnum() or text[j] in "+-."):
        j += 1
    return j


def _cut_back(out: list[str], safe: _Safe | None) -> str:
    """The output cut back to the last point where it was whole (`safe`: its length there and the
    containers open there), with a list's record still open there dropped whole and the open
    containers closed."""
    if safe is None:
        raise ValueError("not a JSON document")
    cut, open_stack = safe
    for depth, (bracket, start, is_element) in enumerate(open_stack):
        if is_element and bracket == "{":
            cut, open_stack = start, open_stack[:depth]  # a record cut short: drop it whole
            break
    body = "".join(out)[:cut].rstrip()
    if body.endswith(","):
        body = body[:-1]
    return body + "".join(_CLOSE[c] for c, _, _ in reversed(open_stack))


def repair_json(text: str) -> tuple[str, bool]:
    """(text `json.loads` accepts, whether the document was cut off).

    One pass over the text: bare `inf`/`nan` (outside strings) become JSON's
    Infinity/NaN.  When the text ends before the document does (kill -9,
    full disk), it is cut back to the end of the last complete member or
    element and the containers still open there are closed, so everything
    written before the cut survives.  An object that is an element of a list
    (a result row, a device) and was still open at the cut is dropped whole:
    a record counts once its closing brace was written.
    Raises ValueError when the text is not JSON-shaped (no opening bracket,
    brackets that do not match, data after the document).
    """
    if text.lstrip()[:1] not in ("{", "["):
        raise ValueError("not a JSON document")
    out: list[str] = []
    length = 0
    # open containers: (bracket, output length before it, whether it is an element of a list)
    stack: list[tuple[str, int, bool]] = []
    safe: _Safe | None = None
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == '"':
            j = _string_end(text, i)
            if j is None:
                break  # cut inside a string
            piece = text[i:j]
            i = j
        elif ch in "{[":
            stack.append((ch, length, bool(stack) and stack[-1][0] == "["))
            out.append(ch)
            length += 1
            i += 1
            safe = (length, list(stack))
            continue
        elif ch in "}]":
            if not stack or _CLOSE[stack[-1][0]] != ch:
                raise ValueError("unbalanced %r at offset %d" % (ch, i))
            stack.pop()
            piece = ch
            i += 1
            out.append(piece)
            length += 1
            if not stack:
                if text[i:].strip():
                    raise ValueError("extra data after the document at offset %d" % i)
                return "".join(out), False
            safe = (length, list(stack))  # a container just completed
            continue
        elif ch == ",":
            safe = (length, list(stack))
            piece = ch
            i += 1
        elif ch.isalnum() or ch in "+-.":
            j = _token_end(text, i)
            token = text[i:j]
            piece = _NONFINITE.get(token.lower(), token)
            i = j
        else:
            piece = ch
            i += 1
        out.append(piece)
        length += len(piece)
    return _cut_back(out, safe), True


def recover_json(text: str) -> dict[str, Any]:
    """Parse a -J file, including one cut off mid-run (kill -9, full disk).

    A complete file parses as is; a cut-off one keeps every row written
    before the cut (see `repair_json`; a row cut short is dropped) and has no
    `end_time`.  Bare `inf`/`nan` (nccl-tests) are read as floats.
    Raises ValueError when nothing usable is left.
    """
    fixed, _ = repair_json(text)
    doc = json.loads(fixed)
    if not isinstance(doc, dict):
        raise ValueError("not an nccl-tests JSON document")
    return doc

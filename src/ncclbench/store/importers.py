"""Bring existing nccl-tests output into the store: text logs and -J JSON files.

Users already have years of `all_reduce_perf` logs.  Text logs are read by
the output module's parser (`ncclbench.output.parse.parse_tests`, the same
one the golden tests use), which copes with -I / -C / -S tables, `N/A`
cells, hypercube's empty op column, NCCL's own log lines mixed in (even
inside a row), Open MPI / srun line tags, CRLF, the older nccl-tests table
layouts, several tests concatenated in one file, and a log cut off mid-run
(imported as 'interrupted').  NCCL's log lines met in a test are kept with
its run (`RunInfo.extra["nccl_log"]`: the raw lines, up to a cap; `explain`
reads them, the store keeps text only) so that `ncclbench explain` can
judge an imported run as it judges a live one.  JSON (docs/behaviour.md §6, versions 1-3)
lives in `jsonlog`; what both produce lives in `imported`.  Anything that
is not recognisably nccl-tests output is refused with one line, before
anything is written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from pathlib import Path
from typing import Any

from ..collectives import COLLECTIVES
from ..core.results import ResultRow, RunInfo
from ..output.collective_infer import infer_collective
from ..output.nccl_log_line import env_settings
from ..output.parse import ParsedText, collective_of, parse_tests
from ..output.text import reducing_max_bytes_lines
from .db import env_that_matters
from .imported import ImportedRun, NotImportableError, nccl_version_string, options_from_rows
from .jsonlog import parse_json_bytes

MAX_IMPORT_BYTES = 512 * 1024 * 1024
EXTRA_NCCL_LOG = "nccl_log"  # RunInfo.extra key: NCCL's own log lines met in the text (raw)
NCCL_LINES_MAX = 20000  # lines kept per run; the count past it is kept too (explain says what is missing)


# ---------------------------------------------------------------- text logs

def _run_info(p: ParsedText, rows: list[ResultRow], program: str, path: str, index: int) -> RunInfo:
    base = p.to_run_info()
    lib = nccl_version_string(p.nccl_version_code)
    extra = {**base.extra, "imported_from": path, "format": "text", "test_index": index,
             "nccl_tests_version": p.nccl_tests_version or ""}
    notes = []
    if p.launcher_prefix:
        notes.append(f"launcher tags ({p.launcher_prefix}) taken off every line")
    if p.rejoined_rows:
        notes.append(f"{p.rejoined_rows} row(s) put back together after NCCL's log cut them apart")
    if p.error_column:
        notes.append("older nccl-tests layout: its `error` column is the largest deviation, not a count; "
                     "#wrong is 0 where it printed 0 and unknown elsewhere")
        extra["wrong_column"] = "error"
    if notes:
        extra["import_notes"] = notes
    if p.nccl_lines:
        # Raw, so that `explain` reads them with whatever reader it has then (explain.nccl_log.facts_from_stored).
        kept = list(p.nccl_lines[:NCCL_LINES_MAX])
        extra[EXTRA_NCCL_LOG] = {"lines": kept, "omitted_lines": len(p.nccl_lines) - len(kept)}
    return dataclasses.replace(
        base, program=program,
        backend=p.backend or "unknown" if p.ncclbench_version is not None else "nccl-tests",
        version=p.nccl_tests_version or p.ncclbench_version or "",
        library=p.library or (f"NCCL {lib}" if lib else ""),
        start_time=next((r.timestamp for r in rows if r.timestamp), ""),
        extra=extra)


def _messages(p: ParsedText) -> list[str]:
    """Lines a live run would have passed to Reporter.message (kept with the run)."""
    out = [p.json_skip_line] if p.json_skip_line else []
    if p.reduced_max_bytes is not None:
        out.append(reducing_max_bytes_lines(p.reduced_max_bytes)[1])
    return out


def _nccl_tests_output(p: ParsedText, rows: list[ResultRow]) -> bool:
    """Anything nccl-tests itself printed: rows, its banner or version line, device lines, failure lines, or
    a pasted command line that runs one of its binaries."""
    return bool(rows or p.devices or p.program or p.nthreads is not None or p.failure_lines
                or p.nccl_tests_version or any(_LAUNCH_BINARY.search(x) for x in p.launch_lines))


def _evidence_of_a_run(p: ParsedText, rows: list[ResultRow]) -> bool:
    """A test worth importing: nccl-tests' own output (a failed or hung run leaves some), or a fragment of
    NCCL's log alone (a paste that kept only NCCL's lines).  Another program's log that carries NCCL's lines
    among its own (a training job's) is not an nccl-tests run: refused."""
    if _nccl_tests_output(p, rows):
        return True
    other = [x for x in p.other_lines + p.notes if x.strip() and not _GAP_LINE.match(x)]
    return len(p.nccl_lines) >= 3 and len(other) <= len(p.nccl_lines) // 4


def _failure(p: ParsedText, rows: list[ResultRow]) -> dict[str, Any] | None:
    """What says the run failed: nccl-tests' / the launcher's failure lines, `# error:` lines, NCCL WARN
    lines (kept raw; `explain` names the causes).  None when nothing does."""
    warns = [ln for ln in p.nccl_lines if " NCCL WARN " in ln and not _BENIGN_WARN.search(ln)]
    wrong = (p.out_of_bounds or 0) > 0 or any((r.out_of_place.wrong or 0) > 0 or (r.in_place.wrong or 0) > 0
                                             for r in rows)
    if not (p.failure_lines or p.errors or warns or wrong):
        return None
    lines = list(dict.fromkeys(p.failure_lines))[:50]
    if wrong:
        lines.append(f"nccl-tests found wrong results: {p.out_of_bounds or 0} out of bounds value(s), "
                     f"{sum(1 for r in rows if (r.out_of_place.wrong or 0) > 0 or (r.in_place.wrong or 0) > 0)} "
                     "row(s) with #wrong > 0")
    first_warn = warns[0].split(" NCCL WARN ", 1)[1].strip() if warns else ""
    return {"lines": lines, "errors": list(p.errors)[:20], "nccl_warn_lines": len(warns), "rows": len(rows),
            "first_warn": f"NCCL WARN {first_warn}" if first_warn else ""}


def _status(p: ParsedText, rows: list[ResultRow], failure: dict[str, Any] | None) -> tuple[str, str]:
    """(status, why) of an imported test: complete, failed (it says so), interrupted (cut or hung)."""
    wrong = failure is not None and any(x.startswith("nccl-tests found wrong results") for x in failure["lines"])
    if p.avg_busbw is not None and rows and not wrong:
        return "complete", ""
    if failure is not None and (p.failure_lines or p.errors or not rows or wrong):
        said = failure["lines"] or failure["errors"] or [failure["first_warn"] or "NCCL WARN lines and no result row"]
        # the most telling line first: nccl-tests' error text over its " .. host pid N: Test failure" trail
        what = next((x for x in said if not _TRAIL.match(x)), said[0])
        return "failed", f"the log says the run failed: {what.strip()[:200]}"
    if not rows and p.avg_busbw is not None:  # the footer: the run finished, the paste lost its rows
        return "complete", ("the log has nccl-tests' footer but no result row: the rows were cut out of the paste"
                            + (f" ({p.gaps} gap(s))" if p.gaps else ""))
    if not rows and not _nccl_tests_output(p, rows):
        return "interrupted", ("only NCCL's own lines, no nccl-tests output: how the run ended is not in the "
                               "text")
    if not rows and p.ends_in_gap:
        return "interrupted", ("a header and no result row, and the log ends in a gap (lines cut out of the paste): "
                               "whether the run hung or its rows were lost is not in the text")
    if not rows:
        return "interrupted", ("a header and no result row: the run hung or was cut off before its first size "
                               "(no failure line in the log)")
    return "interrupted", "the table ends without its footer: the run was cut off or the log was cut"


def _collective(p: ParsedText, rows: list[ResultRow], path: str, override: str | None) -> tuple[str, str, dict[str, Any]]:
    """(program, how it was decided, details) of a test: --collective, the log's own line, the launch
    line, the table (`output.collective_infer`), the file name, in that order."""
    nranks = sum(1 for d in p.devices if d.group == (p.devices[0].group if p.devices else 0)) or None
    inferred = infer_collective(rows, nranks) if rows else None
    detail: dict[str, Any] = {}
    if inferred is not None:
        detail = {"table": inferred.collective, "candidates": list(inferred.candidates), "how": inferred.how,
                  "nranks": inferred.nranks}
    if override:
        return f"{override}_perf", "--collective", detail
    if p.program:
        if inferred is not None and inferred.collective and inferred.collective != collective_of(p.program):
            detail["conflict"] = (f"the log names {p.program} but its table reads as {inferred.collective} "
                                  f"({inferred.how}); kept the log's name")
        return p.program, "the log's 'Collective test starting' line", detail
    for line in p.launch_lines:
        if m := _LAUNCH_BINARY.search(line):
            return f"{m.group(1)}_perf", f"the launch line: {line.strip()[:160]}", detail
    if inferred is not None and inferred.collective:
        return f"{inferred.collective}_perf", inferred.how, detail
    guess = _guess_program(path)
    if guess != "unknown_perf":
        cands = detail.get("candidates") or []
        if not cands or collective_of(guess) in cands:
            return guess, f"the file name {os.path.basename(path)}" + (
                f" (the table leaves {', '.join(cands)})" if cands else ""), detail
    why = inferred.how if inferred is not None else "no result rows, no 'Collective test starting' line"
    return "unknown_perf", f"unknown: {why}", detail


# NCCL WARN lines that do not mean the run failed: an optional library it looked for and went on without.
_BENIGN_WARN = re.compile(r"Failed to open libibverbs|libnccl-net|Could not find: |is deprecated|"
                          r"NCCL_\w+ set by environment|Call to ibv_fork_init failed", re.IGNORECASE)
_GAP_LINE = re.compile(r"^\s*\[\.\.\..*\]\s*$")
_TRAIL = re.compile(r"^\s*\.\. \S+(?: pid \d+)?: Test failure")
_LAUNCH_BINARY = re.compile(r"(?:^|[\s/])(" + "|".join(sorted(COLLECTIVES, key=len, reverse=True)) + r")_perf")


def parse_text_log(text: str, path: str = "<text>", collective: str | None = None) -> list[ImportedRun]:
    """Every test in the text that left a trace (rows, or a failed / hung run's header and lines), in file
    order.  `collective`: the user's word for which collective it is (`--collective`)."""
    tests = [(p, rows) for p, rows in parse_tests(text) if _evidence_of_a_run(p, rows)]
    if any(rows for _, rows in tests):  # several tests: a header-only fragment beside real tests is noise
        kept: list[tuple[ParsedText, list[ResultRow]]] = []  # but its launch line belongs to the next test
        launch: list[str] = []
        for p, rows in tests:
            if rows or p.failure_lines or p.nccl_lines:
                p.launch_lines = launch + p.launch_lines
                kept.append((p, rows))
                launch = []
            else:
                launch += p.launch_lines
        tests = kept
    runs = []
    for i, (p, rows) in enumerate(tests):
        program, how, detail = _collective(p, rows, path, collective)
        coll = collective_of(program)
        options = dataclasses.replace(p.to_options(), program=program, collective=coll)
        options = options_from_rows(options, rows, coll) if rows else options
        summary = p.to_summary()
        digest = hashlib.sha256("\n".join(p.lines).encode()).hexdigest()
        info = _run_info(p, rows, program, path, i)
        info.extra["collective_source"] = how
        if detail:
            info.extra["collective_table"] = detail
        failure = _failure(p, rows)
        status, why = _status(p, rows, failure)
        if failure is not None:
            info.extra["failure"] = failure
        if why:
            info.extra["end_reason"] = why
        if p.launch_lines:
            info.extra["launch_lines"] = list(dict.fromkeys(p.launch_lines))[:5]
        if not _nccl_tests_output(p, rows):
            info.extra["nccl_log_only"] = True
        if p.ends_in_gap:
            info.extra["ends_in_gap"] = True
        if p.gaps:
            info.extra.setdefault("import_notes", []).append(
                f"{p.gaps} gap(s) in the log (lines cut out of the paste): what they held is unknown")
        nccl_env = env_settings(p.nccl_lines)  # what NCCL said it read ("NCCL_X set by environment to Y")
        runs.append(ImportedRun(
            info=info, options=options, rows=rows, summary=summary, status=status, source="import:text",
            source_path=path, index=i, ntests=len(tests), content_hash="text:" + digest,
            env=env_that_matters(nccl_env), messages=_messages(p)))
    return runs


def _guess_program(path: str) -> str:
    name = os.path.basename(path)
    names = sorted(COLLECTIVES, key=len, reverse=True)  # alltoallv before alltoall
    m = re.search("|".join(names), name)
    return f"{m.group(0)}_perf" if m else "unknown_perf"


# ---------------------------------------------------------------- dispatch

_JSON_START = re.compile(r'\[\s*(?:[\[{"\]]|-?\d[\d.eE+-]*\s*[,\]]|true|false|null)')
_LAUNCHER_TAG = re.compile(r"\[[^\]\n]*\](?:\[[^\]\n]*\])?<std(?:out|err|diag)>:")


def _is_json(data: bytes) -> bool:
    """A JSON document, not a text log whose first line starts with `[` (an Open MPI tag, a timestamp)."""
    head = data.lstrip()[:256].decode("utf-8", errors="replace")
    if head.startswith("{"):
        return True
    return head.startswith("[") and not _LAUNCHER_TAG.match(head) and _JSON_START.match(head) is not None

def load_file(path: str | os.PathLike[str], collective: str | None = None) -> list[ImportedRun]:
    """Parse one nccl-tests text log or JSON file; raise one-line errors for anything else.
    `collective` overrides what the file says or its table suggests (text logs)."""
    p = Path(path)
    name = str(path)
    try:
        if p.is_dir():
            raise NotImportableError(f"cannot import {name}: it is a directory")
        size = p.stat().st_size
        if size > MAX_IMPORT_BYTES:
            raise NotImportableError(f"cannot import {name}: {size} bytes is too large for an "
                               "nccl-tests output file")
        data = p.read_bytes()
    except FileNotFoundError:
        raise NotImportableError(f"cannot import {name}: no such file") from None
    except PermissionError:
        raise NotImportableError(f"cannot import {name}: permission denied") from None
    except OSError as e:
        raise NotImportableError(f"cannot import {name}: {e.strerror or e}") from None
    if not data.strip():
        raise NotImportableError(f"cannot import {name}: the file is empty")
    if _is_json(data):
        return [parse_json_bytes(data, name)]
    if b"\x00" in data[:65536]:
        raise NotImportableError(f"cannot import {name}: binary file, not an nccl-tests text log or "
                           "JSON output")
    text = data.decode("utf-8", errors="replace")
    if _mostly_binary(text):
        raise NotImportableError(f"cannot import {name}: binary file, not an nccl-tests text log or "
                                 "JSON output")
    runs = parse_text_log(text, name, collective)
    if not runs:
        raise NotImportableError(f"cannot import {name}: not an nccl-tests text log or JSON file (no result "
                                 "table, nccl-tests banner, device line, failure line or NCCL log line found)")
    return runs


def _mostly_binary(text: str) -> bool:
    """Control characters in more than 1 % of the first 64 KiB: not a text log.  Undecodable bytes do not
    count (a log in another encoding is still a log: its lines are read, its odd characters replaced)."""
    head = text[:65536]
    bad = sum(1 for ch in head if (ord(ch) < 32 and ch not in "\t\r\n\f\x1b\b") or ch == "\x7f")
    return bad > max(8, len(head) // 100)


__all__ = ["EXTRA_NCCL_LOG", "ImportedRun", "NotImportableError", "load_file", "parse_text_log", "collective_of",
           "nccl_version_string", "env_that_matters"]

"""nccl-tests `-J` JSON files (docs/behaviour.md §6, schema versions 1-3) as store records.

nccl-tests writes the file incrementally, so a run killed with -9 leaves a
document cut off mid-token, and it writes ±inf as bare `inf` (invalid JSON).
Reading such a file back is `ncclbench.output.jsonout.repair_json`'s
job (the same routine that reads ncclbench's own cut-off -J files); this
module maps the document onto RunInfo / BenchOptions / rows, and a cut-off
file becomes an 'interrupted' run with the rows measured before the kill.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from typing import Any

from ..core.config import BenchOptions
from ..core.results import DeviceInfo, HalfResult, ResultRow, RunInfo, RunSummary
from ..output.jsonout import repair_json
from ..output.parse import collective_of
from .db import PER_ITER_STATS, env_that_matters, per_iter_stats
from .imported import ImportedRun, NotImportableError, nccl_version_string, options_from_rows

JsonObject = dict[str, Any]  # a JSON object as json.loads hands it back (values checked where read)
FILE_SHA256 = "file_sha256"  # RunInfo.extra key: the imported file's bytes (what older imports were keyed by)


def _backend_of(doc: JsonObject) -> str:
    """The backend an ncclbench -J file records in its own section ("mpi": the CPU backend, whose
    explain says "CPU backend", not "NCCL path unknown"); nccl-tests' own files: "nccl-tests"."""
    own = doc.get("ncclbench")
    backend = own.get("backend") if isinstance(own, dict) else None
    return backend if backend in ("mpi", "nccl") else "nccl-tests"


def content_hash(doc: object) -> str:
    """The store's de-duplication key of a -J document: its content, not its bytes.

    Like a text log's key (the test's lines without launcher tags or CRLF), the
    same document re-imported after a re-indent, a key reorder, CRLF line ends
    or the repair of a cut-off tail's `inf` is the same run."""
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return "json:" + hashlib.sha256(canonical.encode()).hexdigest()


def legacy_hash(run: ImportedRun) -> str | None:
    """The key older ncclbench versions stored a JSON import under (the file's bytes)."""
    raw = run.info.extra.get(FILE_SHA256)
    return f"json:{raw}" if run.source == "import:json" and isinstance(raw, str) else None




def _b(v: object) -> bool:
    """nccl-tests writes booleans as the strings "true"/"false"."""
    if isinstance(v, str):
        return v.strip().lower() == "true"
    return bool(v)


def _f(v: Any) -> float:  # a JSON value: number, string, null
    if v is None:
        return math.nan
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _half(obj: object, per_iter: object) -> HalfResult | None:
    if not isinstance(obj, dict):
        return None
    cpu = "cpu_time" in obj
    t = obj.get("cpu_time" if cpu else "time")
    if t is None or "alg_bw" not in obj or "bus_bw" not in obj:
        return None
    nw = obj.get("nwrong")
    nwf = _f(nw)
    wrong = None if nw is None or not math.isfinite(nwf) or abs(nwf) >= 1 << 63 else int(nwf)
    stats = None
    if isinstance(per_iter, dict) and all(k in per_iter for k in PER_ITER_STATS):
        ppm = per_iter.get("per_process_max_times_us")
        stats = per_iter_stats(
            int(per_iter.get("skipped_iterations", 0)), [_f(per_iter[k]) for k in PER_ITER_STATS],
            [_f(x) for x in per_iter.get("times_us", [])],
            None if not isinstance(ppm, list) else [[_f(x) for x in row] for row in ppm if isinstance(row, list)])
    return HalfResult(time_us=_f(t), cpu_time_us=_f(t) if cpu else math.nan,
                      algbw=_f(obj["alg_bw"]), busbw=_f(obj["bus_bw"]), wrong=wrong,
                      per_iter=stats)


def _row(res: object) -> ResultRow | None:
    if not isinstance(res, dict) or "size" not in res:
        return None
    oop = _half(res.get("out_of_place"), res.get("out_of_place_per_iter"))
    ip = _half(res.get("in_place"), res.get("in_place_per_iter"))
    if oop is None or ip is None:
        return None  # cut off mid-row
    if not all(isinstance(res.get(k, 0), int) and abs(res.get(k, 0)) < 1 << 63
               for k in ("size", "count")):
        raise ValueError(f"bad size/count in result {res.get('size')!r}")
    try:
        root = int(str(res.get("root", "-1")).strip() or -1)
    except ValueError:
        root = -1
    return ResultRow(size=int(res["size"]), count=int(res.get("count", 0)),
                     type=str(res.get("type", "")), redop=str(res.get("redop", "")), root=root,
                     out_of_place=oop, in_place=ip)


def parse_json_bytes(data: bytes, path: str = "<json>") -> ImportedRun:
    """One run from an nccl-tests -J file (complete, or cut off: 'interrupted')."""
    try:
        return _parse(data, path)
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as e:
        raise NotImportableError(f"cannot import {path}: malformed nccl-tests JSON "
                           f"({type(e).__name__}: {e})") from None


def _parse(data: bytes, path: str) -> ImportedRun:
    """The run of one -J file's bytes: the document, its rows, options, run facts and footer."""
    doc, truncated = _document(data, path)
    results, rows = _results(doc, path)
    cfg: JsonObject = doc["config"] if isinstance(doc.get("config"), dict) else {}
    args = [str(a) for a in doc.get("args", [])] if isinstance(doc.get("args"), list) else []
    program = os.path.basename(args[0]) if args else "unknown_perf"
    collective = collective_of(program)
    full_env = _environment(doc)
    devices = _devices(cfg)
    T, G = int(cfg.get("nthreads", 1)), int(cfg.get("ngpus", 1))
    o = options_from_rows(_options(cfg, results, program, collective, args, T, G, path), rows, collective)
    info = _run_info(doc, data, path, program, args, devices, T * G, truncated)
    complete = not truncated and "average_bus_bandwidth" in doc
    return ImportedRun(
        info=info, options=o, rows=rows, summary=_summary(doc, full_env) if complete else None,
        status="complete" if complete else "interrupted", source="import:json", source_path=path,
        index=0, ntests=1, content_hash=content_hash(doc),
        env=env_that_matters(full_env), end_time=doc.get("end_time"))


def _document(data: bytes, path: str) -> tuple[JsonObject, bool]:
    """The -J document (a cut-off one repaired) and whether it was cut off; refused where the
    bytes are not JSON or the JSON is not nccl-tests -J output."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
    try:
        fixed, truncated = repair_json(text)
        doc = json.loads(fixed)
    except ValueError as e:
        raise NotImportableError(f"cannot import {path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or not ({"results", "config"} & doc.keys()) \
            or not ({"version", "args", "nccl_version"} & doc.keys()):
        raise NotImportableError(f"cannot import {path}: JSON, but not nccl-tests -J output "
                                 "(no 'version'/'config'/'results' keys)")
    return doc, truncated


def _results(doc: JsonObject, path: str) -> tuple[list[Any], list[ResultRow]]:
    """The document's 'results' list and its complete rows (a row cut off mid-way is left out);
    refused without a single complete row."""
    results = doc.get("results", [])
    if not isinstance(results, list):
        raise NotImportableError(f"cannot import {path}: 'results' is not a list")
    rows = [r for r in (_row(x) for x in results) if r is not None]
    if not rows:
        raise NotImportableError(f"cannot import {path}: nccl-tests JSON without a single complete "
                                 "result row")
    return results, rows


def _environment(doc: JsonObject) -> dict[str, str]:
    """The 'env' list's NAME=value items as a mapping (other items left out)."""
    env = doc.get("env", [])
    full_env = {}
    for item in env if isinstance(env, list) else []:
        if isinstance(item, str) and "=" in item:
            k, v = item.split("=", 1)
            full_env[k] = v
    return full_env


def _devices(cfg: JsonObject) -> list[DeviceInfo]:
    """The config's 'devices', one per rank (entries that are not objects left out)."""
    devices = []
    for p, d in enumerate(cfg.get("devices", []) if isinstance(cfg.get("devices"), list) else []):
        if not isinstance(d, dict):
            continue
        devices.append(DeviceInfo(
            rank=int(d.get("rank", p)), group=int(d.get("group", 0)), pid=int(d.get("pid", 0)),
            hostname=str(d.get("hostname", "")), device=int(d.get("device", -1)),
            device_hex=str(d.get("device_hex", "")), device_info=str(d.get("device_info", "")),
            process=p))
    return devices


def _options(cfg: JsonObject, results: list[Any], program: str, collective: str, args: list[str],
             nthreads: int, ngpus: int, path: str) -> BenchOptions:
    """The options the run was started with, as the config records them (ncclbench's defaults
    for those it does not; -d / -o / -r are read from the rows afterwards)."""
    defaults = BenchOptions()
    step_factor, step_bytes = defaults.step_factor, defaults.step_bytes
    if "step_factor" in cfg:
        step_factor = int(cfg["step_factor"])
    elif "step_bytes" in cfg:
        step_factor, step_bytes = 1, int(cfg["step_bytes"])
    return BenchOptions(
        collective=collective, program=program, argv=tuple(args), nthreads=nthreads, ngpus=ngpus,
        min_bytes=int(cfg.get("minimum_bytes", defaults.min_bytes)),
        max_bytes=int(cfg.get("maximum_bytes", defaults.max_bytes)), step_factor=step_factor, step_bytes=step_bytes,
        warmup_iters=int(cfg.get("warmup_iters", defaults.warmup_iters)),
        iters=int(cfg.get("iterations", defaults.iters)),
        agg_iters=int(cfg.get("aggregated_iterations", defaults.agg_iters)),
        check=int(cfg.get("validation", defaults.check)),
        cudagraph=int(cfg.get("graph", defaults.cudagraph)),
        blocking=1 if _b(cfg.get("blocking_collectives", "false")) else 0,
        per_iter_timing=_b(cfg.get("per_iter_timing", "false")),
        per_iter_skip=int(cfg.get("per_iter_skip", 0)),
        parallel_init=_b(cfg.get("parallel_init", "false")),
        report_cputime=any(isinstance(r, dict) and isinstance(r.get("out_of_place"), dict)
                           and "cpu_time" in r["out_of_place"] for r in results),
        output_file=path)


def _run_info(doc: JsonObject, data: bytes, path: str, program: str, args: list[str], devices: list[DeviceInfo],
              ranks_per_process: int, truncated: bool) -> RunInfo:
    """Who ran where: library, devices, ranks (threads x GPUs of each process of the first group),
    and where the record came from."""
    first_group = devices[0].group if devices else 0
    procs_in_group = sum(1 for d in devices if d.group == first_group) or 1
    code = doc.get("nccl_version") if isinstance(doc.get("nccl_version"), int) else None
    lib = nccl_version_string(code)
    return RunInfo(
        program=program, argv=args, backend=_backend_of(doc), version="", nccl_version_code=code,
        nccl_headers_code=None, library=f"NCCL {lib}" if lib else "", devices=devices,
        world_size=len(devices) or 1, nranks=ranks_per_process * procs_in_group,
        ngroups=len({d.group for d in devices}) or 1, start_time=str(doc.get("start_time", "")),
        hosts=list(dict.fromkeys(d.hostname for d in devices)),
        extra={"imported_from": path, "format": "json", "json_version": doc.get("version"),
               "truncated": truncated, FILE_SHA256: hashlib.sha256(data).hexdigest()})


def _summary(doc: JsonObject, full_env: dict[str, str]) -> RunSummary:
    """The footer of a complete run: average busbw, out-of-bounds count, the NCCL_TESTS_MIN_BW
    gate and its verdict, the errors."""
    avg = doc.get("average_bus_bandwidth") or {}
    oob = doc.get("out_of_bounds") or {}
    okay = str(avg.get("okay", "unchecked"))
    gate = full_env.get("NCCL_TESTS_MIN_BW")
    errors = doc.get("errors", [""])
    return RunSummary(
        out_of_bounds=int(oob.get("count", 0)), avg_busbw=_f(avg.get("bandwidth")),
        min_bw_gate=_f(gate) if gate else None,
        gate_ok=None if okay == "unchecked" else okay == "true",
        errors=[str(e) for e in errors] if isinstance(errors, list) else [str(errors)])

"""`ncclbench history | show | import | compare | check | baseline | report`.

`add_subcommands(subparsers)` adds them to the main parser (each sets
`func(args) -> int`); `run_store_command(argv)` runs one on its own (the main
CLI calls it for these subcommands).  Errors are
BenchError/ArgumentError with one-line messages; the main CLI prints them.
Exit codes: 0 ok, 7 regression found by `check`, 255 bad arguments/input.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from ..errors import ArgumentError, BenchError, ExitCode
from . import stats
from .compare import compare_runs, comparison_to_dict, format_comparison, format_gate, gate, \
    gate_to_dict
from .db import ResultStore, default_db_path
from .importers import ImportedRun, load_file
from .reporter import store_imported

_DB_HELP = "result store file (default: $NCCLBENCH_DB, else $XDG_DATA_HOME/ncclbench/results.sqlite)"
_REF_HELP = "run id, 'latest' (or latest~N), a baseline name, or an nccl-tests output file (FILE#N " \
            "picks the N-th test of a log)"


def parse_pct(text: str, what: str = "limit") -> float:
    """'5%', '5' -> 5.0 (percent)."""
    t = text.strip().rstrip("%").strip()
    try:
        v = float(t)
    except ValueError:
        raise ArgumentError(f"bad {what} {text!r}: expected a percentage like 5%") from None
    if not (0 <= v < 100) or math.isnan(v):
        raise ArgumentError(f"bad {what} {text!r}: must be between 0% and 100%")
    return v


def _db_path(args) -> Path:
    return Path(args.db).expanduser() if getattr(args, "db", None) else default_db_path()


def _open(args, *, create: bool = False) -> ResultStore:
    return ResultStore(_db_path(args), create=create)


class _Refs:
    """Resolves run references, opening the store only when one is needed."""

    def __init__(self, args):
        self.args = args
        self._store: ResultStore | None = None

    @property
    def store(self) -> ResultStore:
        if self._store is None:
            path = _db_path(self.args)
            if not path.exists():
                raise ArgumentError(f"no result store at {path} (nothing recorded yet; "
                                    "run a test or `ncclbench import FILE`)")
            self._store = ResultStore(path, create=False)
        return self._store

    def get(self, ref: str):
        file_part, _, pick = ref.rpartition("#")
        if os.path.isfile(ref):
            return self._from_file(ref, None)
        if file_part and os.path.isfile(file_part):
            if not pick.isdigit() or int(pick) < 1:
                raise ArgumentError(f"bad run reference {ref!r}: use FILE#N with N >= 1")
            return self._from_file(file_part, int(pick))
        if ("/" in ref or ref.endswith((".txt", ".log", ".json", ".out"))) and not ref.isdigit():
            raise ArgumentError(f"no such file: {ref}")
        store = self.store
        return store.get_run(store.resolve(ref))

    def _from_file(self, path: str, pick: int | None) -> ImportedRun:
        runs = load_file(path)
        if pick is None:
            if len(runs) > 1:
                raise ArgumentError(f"{path} holds {len(runs)} tests; pick one with {path}#N "
                                    "or import the file and use run ids")
            return runs[0]
        if pick > len(runs):
            raise ArgumentError(f"{path} holds {len(runs)} test(s); there is no #{pick}")
        return runs[pick - 1]

    def close(self) -> None:
        if self._store is not None:
            self._store.close()


def _placement(args) -> str:
    return "in_place" if getattr(args, "in_place", False) else "out_of_place"


# ---------------------------------------------------------------- commands

def cmd_history(args) -> int:
    path = _db_path(args)
    if not path.exists():
        headers, runs_summ, baselines = [], {}, {}
    else:
        with ResultStore(path, create=False) as store:
            headers = store.list_runs(limit=args.limit, program=args.program)
            runs_summ = {h.id: stats.run_summary(store.get_run(h.id).rows) for h in headers}
            baselines = {}
            for name, rid, _, _ in store.list_baselines():
                baselines.setdefault(rid, []).append(name)
    if args.format == "json":
        out = []
        for h in headers:
            plateau, lat = runs_summ[h.id]
            out.append({"id": h.id, "created_at": h.created_at, "start_time": h.start_time,
                        "status": h.status, "program": h.program, "collective": h.collective,
                        "nranks": h.nranks, "hosts": h.hosts, "gpus": h.gpus, "rows": h.nrows,
                        "plateau_busbw": plateau, "latency_us": lat, "source": h.source,
                        "source_path": h.source_path, "argv": h.argv,
                        "baselines": baselines.get(h.id, [])})
        print(json.dumps(out, indent=1))
        return 0
    if not headers:
        print(f"ncclbench: no runs recorded in {path}" + (" matching " + args.program
              if args.program else ""), file=sys.stderr)
        return 0
    fmt = "%5s  %-19s  %-11s  %-20s  %5s  %-20s  %4s  %9s  %8s  %s"
    print(fmt % ("ID", "DATE", "STATUS", "TEST", "RANKS", "GPU", "ROWS", "PLAT GB/s", "LAT us",
                 "SOURCE / BASELINE"))
    for h in headers:
        plateau, lat = runs_summ[h.id]
        gpu = sorted(set(h.gpus))
        gpu_s = (gpu[0] + (f" +{len(gpu) - 1}" if len(gpu) > 1 else "")) if gpu else "-"
        src = "ncclbench" if h.source == "ncclbench" else \
            f"{h.source.split(':')[-1]}:{os.path.basename(h.source_path or '')}"
        if h.id in baselines:
            src += "  [" + ", ".join(baselines[h.id]) + "]"
        date = (h.start_time or h.created_at.replace("T", " "))[:19]
        print((fmt % (h.id, date, h.status, h.program[:20], h.nranks or "-", gpu_s[:20], h.nrows,
                      "-" if plateau is None else f"{plateau:.2f}",
                      "-" if lat is None else f"{lat:.2f}", src)).rstrip())
    print(f"# {stats.PLATEAU_DEFINITION}; {stats.LATENCY_DEFINITION} (out-of-place, first series)")
    return 0


def show_text(run) -> str:
    """A stored or imported run as the nccl-tests text it printed, through the live
    formatter (`ncclbench.output.text.render_run`; no footer for an interrupted run).
    The `# Writing JSON output to` line comes back for runs that printed it, not for
    runs read from the JSON file itself."""
    from ..output.text import render_run

    opts = run.options
    json_path = None
    if opts.json_enabled and run.info.extra.get("format") != "json":
        json_path = opts.output_file
    return render_run(run.info, opts, run.rows, run.summary, json_path=json_path)


def cmd_show(args) -> int:
    refs = _Refs(args)
    try:
        run = refs.get(args.run)
    finally:
        refs.close()
    sys.stdout.write(show_text(run))
    if run.status != "complete":
        print(f"ncclbench: {run.label} is {run.status} ({len(run.rows)} rows recorded)",
              file=sys.stderr)
    return 0


def cmd_import(args) -> int:
    parsed: list[ImportedRun] = []
    for f in args.files:
        parsed += load_file(f)  # all files parse before anything is written
    with _open(args, create=True) as store:
        done = store_imported(store, parsed)
    for run, rid, new in done:
        what = f"run {rid}" if new else f"already stored as run {rid}"
        print(f"{run.label}: {what} ({run.info.program}, {len(run.rows)} rows, {run.status})")
    return 0


def cmd_compare(args) -> int:
    refs = _Refs(args)
    try:
        a, b = refs.get(args.a), refs.get(args.b)
    finally:
        refs.close()
    c = compare_runs(a, b, _placement(args))
    if args.format == "json":
        print(json.dumps(comparison_to_dict(c), indent=1))
    else:
        sys.stdout.write(format_comparison(c))
    return 0


def cmd_check(args) -> int:
    max_drop = parse_pct(args.max_drop, "--max-drop")
    max_rise = parse_pct(args.max_rise, "--max-rise") if args.max_rise else max_drop
    refs = _Refs(args)
    try:
        run = refs.get(args.run)
        name = args.against
        if os.path.isfile(name) or "#" in name:
            baseline, base_name = refs.get(name), None
        else:
            store = refs.store
            bid = store.get_baseline(name)
            if bid is None and not name.isdigit() and name.lower() not in ("latest", "last"):
                raise ArgumentError(f"no baseline named {name!r} (see `ncclbench baseline list`)")
            baseline = store.get_run(bid if bid is not None else store.resolve(name))
            base_name = name if bid is not None else None
    finally:
        refs.close()
    g = gate(run, baseline, max_drop, max_rise, _placement(args))
    if args.format == "json":
        print(json.dumps(gate_to_dict(g), indent=1))
    else:
        sys.stdout.write(format_gate(g, base_name))
    return 0 if g.ok else int(ExitCode.DATA_ERRORS)


def cmd_baseline(args) -> int:
    if args.action == "list":
        path = _db_path(args)
        if not path.exists():
            print(f"ncclbench: no baselines: no result store at {path}", file=sys.stderr)
            return 0
        with ResultStore(path, create=False) as store:
            items = store.list_baselines()
            if not items:
                print(f"ncclbench: no baselines set in {path}", file=sys.stderr)
                return 0
            for name, rid, created, note in items:
                h = store.get_run_header(rid)
                print(f"{name:<20}  run {rid:<5}  {h.program:<20}  set {created[:19]}"
                      + (f"  {note}" if note else ""))
        return 0
    if not _db_path(args).exists():
        raise ArgumentError(f"no result store at {_db_path(args)} (nothing recorded yet)")
    with _open(args) as store:
        if args.action == "set":
            rid = store.resolve(args.run)
            store.set_baseline(args.name, rid, args.note)
            print(f"baseline '{args.name}' = run {rid}")
        else:
            store.delete_baseline(args.name)
            print(f"baseline '{args.name}' removed")
    return 0


def cmd_report(args) -> int:
    from ..report.html import write_report

    refs = _Refs(args)
    try:
        runs = [refs.get(r) for r in args.runs]
    finally:
        refs.close()
    written = write_report(runs, args.output, png=args.png, title=args.title,
                           placement=_placement(args))
    for p in written:
        print(f"wrote {p}")
    return 0


# ---------------------------------------------------------------- wiring

def add_subcommands(subparsers) -> None:
    def sub(name: str, help_: str, func) -> argparse.ArgumentParser:
        p = subparsers.add_parser(name, help=help_, description=help_)
        p.add_argument("--db", metavar="PATH", help=_DB_HELP)
        p.set_defaults(func=func)
        return p

    p = sub("history", "list stored runs, newest first", cmd_history)
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--limit", type=int, default=20, help="show at most N runs (0 = all; default 20)")
    p.add_argument("--program", help="only runs of this test (e.g. all_reduce_perf)")

    p = sub("show", "reprint a stored run as the nccl-tests table", cmd_show)
    p.add_argument("run", metavar="RUN", help=_REF_HELP)

    p = sub("import", "import nccl-tests text logs and -J JSON files into the store", cmd_import)
    p.add_argument("files", metavar="FILE", nargs="+")

    p = sub("compare", "per-size busbw and time of two runs, with deltas beyond noise marked",
            cmd_compare)
    p.add_argument("a", metavar="A", help=_REF_HELP)
    p.add_argument("b", metavar="B", help=_REF_HELP)
    p.add_argument("--in-place", action="store_true", help="compare in-place columns")
    p.add_argument("--format", choices=("text", "json"), default="text")

    p = sub("check", "regression gate: exit 7 when RUN is worse than a baseline", cmd_check)
    p.add_argument("run", metavar="RUN", help=_REF_HELP)
    p.add_argument("--against", required=True, metavar="NAME",
                   help="baseline name (or any run reference)")
    p.add_argument("--max-drop", default="5%", metavar="PCT",
                   help="largest allowed busbw drop at large sizes (default 5%%)")
    p.add_argument("--max-rise", default=None, metavar="PCT",
                   help="largest allowed time rise at sizes <= 64 KiB (default: --max-drop)")
    p.add_argument("--in-place", action="store_true", help="gate on in-place columns")
    p.add_argument("--format", choices=("text", "json"), default="text")

    p = sub("baseline", "name runs as baselines for `check` and `--baseline`", cmd_baseline)
    actions = p.add_subparsers(dest="action", required=True, metavar="{set,list,rm}")
    a = actions.add_parser("set", help="set NAME to RUN")
    a.add_argument("name", metavar="NAME")
    a.add_argument("run", metavar="RUN")
    a.add_argument("--note", default=None)
    actions.add_parser("list", help="list baselines")
    a = actions.add_parser("rm", help="remove a baseline")
    a.add_argument("name", metavar="NAME")
    for ap in actions.choices.values():
        ap.add_argument("--db", metavar="PATH", help=_DB_HELP, default=argparse.SUPPRESS)

    p = sub("report", "write a self-contained HTML report (plots + metadata) of runs", cmd_report)
    p.add_argument("runs", metavar="RUN", nargs="+", help=_REF_HELP)
    p.add_argument("-o", "--output", default="report.html", metavar="FILE",
                   help="HTML file to write (default report.html)")
    p.add_argument("--png", action="store_true",
                   help="also write the plots as PNG files next to the HTML (needs matplotlib)")
    p.add_argument("--title", default=None)
    p.add_argument("--in-place", action="store_true", help="plot in-place columns")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would exit 2; ncclbench uses 255
        raise ArgumentError(f"{self.prog}: {message}")


def run_store_command(argv: list[str]) -> int:
    """Run one store subcommand (`argv[0]` names it); the main CLI's entry point here."""
    parser = _Parser(prog="ncclbench")
    add_subcommands(parser.add_subparsers(dest="command", required=True))
    try:
        args = parser.parse_args(argv)
        return int(args.func(args))
    except BenchError as e:
        print(f"ncclbench: {e.message}", file=sys.stderr)
        return int(e.code)
    except SystemExit as e:  # --help
        return int(e.code or 0)

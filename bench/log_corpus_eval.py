"""Score `ncclbench explain` on the log corpus (tests/fixtures/log_corpus/manifest.json, issue 26).

For every entry: import the log as `ncclbench explain LOG` does, judge it, and compare with the
manifest's expectation:

* verdict: the judgement's label mapped to the manifest's bands (as expected -> as_expected, below
  expected -> below, above ... -> above, failed -> failed, anything else -> not_judged);
* causes: every expected cause id among the causes the explanation names (`TrapReport.causes()`);
* words: every `cause_words` entry in the explanation's text (lower case);
* no crying wolf: an entry expected healthy (`as_expected`, no causes) must raise no ERROR trap.

An entry is right when all four hold; the share of right entries is the score (target >= 90 %).
Every miss is listed with what differed, so it can be explained.

    python bench/log_corpus_eval.py [--manifest PATH] [--out DIR] [--name log-corpus-DATE]

writes DIR/NAME.json and DIR/NAME.md (without --out: the table to stdout).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from provenance import commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')

MANIFEST = ROOT / "tests" / "fixtures" / "log_corpus" / "manifest.json"
TARGET = 0.90
# Why a miss is a miss, for the misses understood (printed beside them; the score does not read this).
EXPLAINED = {
    "gh-nccl-tests-119-healthy-a100-3nodes.log":
        "the maintainer judged 96 GB/s against 4 HDR NICs per node, which the log does not state (no NCCL "
        "INFO line, 4 of 24 device lines kept): the NIC count and speed are never assumed, so the run is not "
        "judged rather than called healthy -- and not called below either. Even with its 24 device lines (3 hosts "
        "of 8) the ceiling stays unknown: the NICs are in no line. The corpus README asks for 'the verdict the log "
        "supports, not the one the thread reached with facts the log lacks', as the p4de entry has it "
        "(not_judged); this entry's as_expected rests on the thread's 4 HDR NICs per node",
    "gh-nccl-340-nvlink-bridge-unseated.log":
        "a partly seated NVLink bridge leaves no trace in the kept fragment (the head of the paste: launch line, "
        "header, one row); only NVML's link state (a live run's topology) can show it",
}


def band(label: str) -> str:
    if label == "as expected":
        return "as_expected"
    if label == "below expected":
        return "below"
    if label.startswith("above"):
        return "above"
    if label == "failed":
        return "failed"
    return "not_judged"


@dataclass
class Scored:
    file: str
    expected_verdict: str
    verdict: str
    expected_causes: list[str]
    causes: list[str]
    missing_causes: list[str] = field(default_factory=list)
    missing_words: list[str] = field(default_factory=list)
    wolf: list[str] = field(default_factory=list)  # ERROR traps raised on a log expected healthy
    error: str = ""  # the import or explain failed
    seconds: float = 0.0
    lines: list[str] = field(default_factory=list)

    @property
    def verdict_ok(self) -> bool:
        return self.verdict == self.expected_verdict

    @property
    def ok(self) -> bool:
        return not self.error and self.verdict_ok and not self.missing_causes and not self.missing_words \
            and not self.wolf

    def why(self) -> str:
        out = []
        if self.error:
            out.append(f"error: {self.error}")
        if not self.verdict_ok:
            out.append(f"verdict {self.verdict}, expected {self.expected_verdict}")
        if self.missing_causes:
            out.append(f"causes missed: {', '.join(self.missing_causes)} (named: {', '.join(self.causes) or 'none'})")
        if self.missing_words:
            out.append(f"words missing: {', '.join(self.missing_words)}")
        if self.wolf:
            out.append(f"cried wolf: {', '.join(self.wolf)}")
        return "; ".join(out)


def score_entry(entry: dict, corpus: Path) -> Scored:
    """One manifest entry judged as `ncclbench explain LOG` judges it."""
    from ncclbench.core.errors import BenchError
    from ncclbench.explain.run_explain import explain_run
    from ncclbench.explain.stored import run_facts
    from ncclbench.explain.traps import ERROR, cause_of
    from ncclbench.store.importers import load_file

    s = Scored(entry["file"], entry["expected_verdict"], "", list(entry["expected_causes"]), [])
    t0 = time.perf_counter()
    try:
        runs = load_file(corpus / entry["file"])
    except BenchError as e:
        s.error, s.verdict = str(e), "refused"
        return s
    except Exception as e:  # a bug in the import: this entry's miss
        s.error, s.verdict = f"import raised {type(e).__name__}: {e}", "error"
        return s
    verdicts, causes, lines, errors = [], [], [], []
    for run in runs:
        try:
            explained = explain_run(run_facts(run))
        except Exception as e:  # a bug: scored as a miss with its name, the other entries still run
            s.error, s.verdict = f"explain raised {type(e).__name__}: {e}", "error"
            return s
        j = explained.judgement
        verdicts.append(band(j.verdict.label))
        causes += [c for c in j.traps.causes() if c not in causes]
        errors += [cause_of(t) or t.name for t in j.traps.raised if t.severity == ERROR]
        lines += [f"# {run.label}: {run.status}, {run.options.collective}"] + explained.lines
    s.seconds = time.perf_counter() - t0
    # a file of several tests: its verdict is the first judged test's (the others are listed in lines)
    s.verdict = next((v for v in verdicts if v != "not_judged"), verdicts[0] if verdicts else "not_judged")
    s.causes, s.lines = causes, lines
    text = "\n".join(lines).lower()
    s.missing_causes = [c for c in s.expected_causes if c not in causes and c != "healthy"]
    s.missing_words = [w for w in entry.get("cause_words", []) if w.lower() not in text]
    if s.expected_verdict == "as_expected" and not [c for c in s.expected_causes if c != "healthy"]:
        s.wolf = list(dict.fromkeys(errors))
    return s


def evaluate(manifest: Path = MANIFEST) -> list[Scored]:
    corpus = manifest.parent
    entries = json.loads(manifest.read_text(encoding="utf-8"))
    return [score_entry(e, corpus) for e in entries]


def summary(results: list[Scored]) -> dict:
    n = len(results)
    right = sum(r.ok for r in results)
    return {"entries": n, "right": right, "share": right / n if n else 0.0, "target": TARGET,
            "verdict_right": sum(r.verdict_ok for r in results),
            "causes_right": sum(not r.missing_causes for r in results),
            "words_right": sum(not r.missing_words for r in results),
            "cried_wolf": sum(bool(r.wolf) for r in results),
            "errors": sum(bool(r.error) for r in results)}


def markdown(results: list[Scored], meta: dict) -> str:
    s = summary(results)
    out = [f"# Log corpus: `ncclbench explain` against the manifest ({meta['date']})", "",
           f"Commit {meta['commit']}, {meta['machine']}; command: `{meta['command']}`.", "",
           f"**{s['right']} of {s['entries']} right ({100 * s['share']:.0f} %, target {100 * TARGET:.0f} %)**: "
           f"verdict right {s['verdict_right']}, causes right {s['causes_right']}, words right {s['words_right']}, "
           f"cried wolf on a healthy log {s['cried_wolf']}, import errors {s['errors']}.", "",
           "| log | expected | verdict | expected causes | causes named | right |", "|---|---|---|---|---|---|"]
    for r in results:
        out.append(f"| {r.file} | {r.expected_verdict} | {r.verdict} | {', '.join(r.expected_causes) or '-'} | "
                   f"{', '.join(r.causes) or '-'} | {'yes' if r.ok else 'no'} |")
    misses = [r for r in results if not r.ok]
    out += ["", "## Misses", ""]
    out += [f"* `{r.file}`: {r.why()}" + (f". Why: {EXPLAINED[r.file]}" if r.file in EXPLAINED else "")
            for r in misses] or ["None."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--manifest", type=Path, default=MANIFEST)
    ap.add_argument("--out", type=Path, default=None, help="directory for NAME.json and NAME.md")
    ap.add_argument("--name", default=f"log-corpus-{time.strftime('%Y-%m-%d')}")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every entry's explanation")
    args = ap.parse_args(argv)
    results = evaluate(args.manifest)
    meta = {"date": time.strftime("%Y-%m-%d"), "commit": commit(),
            "machine": "CPU only (explain reads logs, no GPU needed)",
            "command": " ".join(["python bench/log_corpus_eval.py", *(argv if argv is not None else sys.argv[1:])])}
    md = markdown(results, meta)
    if args.verbose:
        for r in results:
            print(f"== {r.file}: {'right' if r.ok else 'MISS ' + r.why()}")
            print("\n".join(r.lines))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.name}.md").write_text(md)
        doc = {"meta": meta, "summary": summary(results),
               "entries": [{**asdict(r), "ok": r.ok, "why": r.why()} for r in results]}
        (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A model check of the gate's latency figure on a recorded collection, NOT an injection trial:
each trial's candidate (a good run) is judged as recorded and again with every one of its gate-round
times multiplied by a factor (default 1.30), against the baselines of 1, 3 and 5 good runs before it,
with `check --max-rise` 15 (bench/gate_trials.py's latency case asks for half of the 30 % it injects).

What it says: whether the gate, on this machine's own run-to-run noise, calls a rise of exactly the
factor in every round (a slope of known size, which a CPU hog did not give: it lifted the figure in a
step) a regression.  What it does not say: how a real slowdown reaches the rounds (it may lift some
rounds and not others, or lift the table but not the rounds), so "caught" here is the gate's
arithmetic on real noise, not a measured detection.

How: the store is copied (the collection's runs.sqlite is only read); for each trial the candidate's
gate rounds are scaled in the copy's `runs.summary` (out of place and in place), the runs are read back
through the store as the gate reads any run, judged with this tree's `store.gate.gate`, and the
candidate's record is put back before the next trial (a candidate is a baseline run of later trials).

    python bench/gate_rejudge_scaled.py --out DIR [--factor 1.30] [--results FILE.md]

DIR holds runs.sqlite and gate-trials.json (bench/gate_trials.py's collection); the trials are its
good runs: trial r's candidate is good run r, its n-run baseline the good runs r-n .. r-1.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from provenance import commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')

ASKED = 15.0
BASELINES = (1, 3, 5)


def scaled_summary(text: str, factor: float) -> str:
    """A stored run summary with every gate-round time (out of place and in place) times `factor`."""
    doc = json.loads(text)
    for s in (doc.get("gate_latency") or {}).get("series", []):
        for place in ("out_of_place", "in_place"):
            s[place] = [[None if t is None else t * factor for t in r] for r in s.get(place) or []]
    return json.dumps(doc)


def judge_all(db: Path, good: dict[int, int], factors: list[float]) -> list[dict]:
    """Every trial, every baseline size, every factor: exit, verdict, the latency figure's change and limit."""
    from ncclbench.store import ResultStore
    from ncclbench.store.gate import gate
    from ncclbench.store.gate_figures import LATENCY

    trials = sorted(r for r in good if r >= 1)
    found = []
    for r in trials:
        cand = good[r]
        con = sqlite3.connect(db)
        (orig,) = con.execute("SELECT summary FROM runs WHERE id = ?", (cand,)).fetchone()
        for factor in factors:
            con.execute("UPDATE runs SET summary = ? WHERE id = ?",
                        (orig if factor == 1.0 else scaled_summary(orig, factor), cand))
            con.commit()
            with ResultStore(db, create=False) as store:
                me = store.get_run(cand)
                for n in BASELINES:
                    ids = [good[x] for x in range(r - n, r) if x in good]
                    if len(ids) < n:
                        continue
                    base = [store.get_run(i) for i in ids]
                    g = gate(me, base[-1], history=base[:-1], max_rise_pct=ASKED)
                    j = next(x for x in g.judgements if x.figure == LATENCY)
                    found.append({"trial": r, "run": cand, "baseline": ids, "runs": n, "factor": factor,
                                  "exit_code": g.exit_code, "status": g.status, "verdict": j.verdict.lower(),
                                  "worse_pct": round(j.worse_pct, 2), "limit_pct": round(j.limit_pct, 2),
                                  "detectable_pct": round(j.detectable_pct or 0.0, 2), "measured": j.how,
                                  "noise_source": j.noise.source})
        con.execute("UPDATE runs SET summary = ? WHERE id = ?", (orig, cand))
        con.commit()
        con.close()
    return found


def _range(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} ({min(xs):.1f} .. {max(xs):.1f})" if xs else "-"


def report(doc: dict) -> str:
    m = doc["meta"]
    lines = [f"# Model check: the gate on recorded runs with the candidate's gate rounds scaled ({m['source']})", "",
             "**A model check, not an injection trial**: the candidates are good runs of the collection, judged as "
             "recorded (x 1.00) and with every gate-round time multiplied by the factor; nothing was injected into "
             "a running job. It shows the gate's arithmetic on this machine's real run-to-run noise; how a real "
             "slowdown reaches the rounds was not measured.", "",
             f"Judged with commit {m['judged_with_commit']} (`python bench/gate_rejudge_scaled.py`), `--max-rise "
             f"{ASKED:g}`; the latency figure: {m['measured']}.", "",
             "| baseline | rounds x | trials | ok | exit 7 | exit 9 | latency change, % worse | limit, % |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for n in BASELINES:
        for f in doc["factors"]:
            ts = [t for t in doc["trials"] if t["runs"] == n and t["factor"] == f]
            if not ts:
                continue
            c = {k: sum(t["exit_code"] == k for t in ts) for k in (0, 7, 9)}
            lines.append(f"| {n}-run | {f:.2f} | {len(ts)} | {c[0]} | {c[7]} | {c[9]} | "
                         f"{_range([t['worse_pct'] for t in ts])} | {_range([t['limit_pct'] for t in ts])} |")
    lines += ["", "Exit 9 (the gate's status, the latency figure's verdict): " + ("; ".join(
        f"{k} {v}" for k, v in sorted(_tally(doc["trials"]).items())) or "none") + ".", ""]
    return "\n".join(lines)


def _tally(trials: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in trials:
        if t["exit_code"] == 9:
            k = f"{t['runs']}-run x {t['factor']:.2f}: {t['status']} (latency {t['verdict']})"
            out[k] = out.get(k, 0) + 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="the collection's folder: runs.sqlite and gate-trials.json")
    ap.add_argument("--factor", type=float, default=1.30)
    ap.add_argument("--results", default=None, help="also write the report here (FILE.md and FILE.json)")
    ap.add_argument("--commit", default=None, help="the commit of this tree when it is no git checkout")
    ap.add_argument("--label", default=None, help="the collection's name in the report (default: --out's name)")
    args = ap.parse_args()
    out = Path(args.out)
    runs = json.loads((out / "gate-trials.json").read_text())["runs"]
    good = {int(r): v["run"] for r, v in runs.get("good", {}).items()}
    factors = [1.0, args.factor]
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "runs.sqlite"
        shutil.copyfile(out / "runs.sqlite", db)
        trials = judge_all(db, good, factors)
    doc = {"meta": {"source": args.label or out.name, "judged_with_commit":
                    args.commit or commit(), "asked_rise_pct": ASKED,
                    "measured": next((t["measured"] for t in trials), None)},
           "factors": factors, "trials": trials}
    text = report(doc)
    if args.results:
        res = Path(args.results)
        res.write_text(text)
        res.with_suffix(".json").write_text(json.dumps(doc, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

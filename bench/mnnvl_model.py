#!/usr/bin/env python3
"""Multi-node NVLink (GB200/GB300 NVL72) in ncclbench's ceiling model, against published figures.

Each rack is described as its real trays (18 compute trays of 4 GPUs, 18 NVLink5 links of 50 GB/s
per GPU, one 400G InfiniBand NIC per GPU, every GPU in one NVLink fabric clique:
`ncclbench.simulation.hosts.nvl72_rack`), materialised as a fake NVML + sysfs tree, read back by
the real readers, and judged by `expected_ceiling` exactly as a run would be.  It writes the
model-vs-published table (with citations), the NVLS model's values over the GPU count (bounded),
and what is not modelled.  CPU only; nothing is fitted to the published numbers.

  python bench/mnnvl_model.py [--out bench/results/mnnvl-model-2026-11-26]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from provenance import commit  # noqa: E402  (bench/: the one answer to 'which commit is this tree')

from ncclbench.explain.ceiling import Ceiling, expected_ceiling  # noqa: E402
from ncclbench.explain.gather_topology import gather_host_topology  # noqa: E402
from ncclbench.explain.nccl_bandwidth import NVLS_EFFICIENCY, fmt_gbps, nvls_model  # noqa: E402
from ncclbench.explain.nccl_log import parse_nccl_log  # noqa: E402
from ncclbench.explain.plateau_verdict import judge, plateau_busbw  # noqa: E402
from ncclbench.explain.topology import HostTopology  # noqa: E402
from ncclbench.simulation import hosts as S  # noqa: E402

GiB = 2**30
COREWEAVE = ("coreweave/nccl-tests README.md @0120901, 'Expected Performance / GB200' (NCCL 2.26.2, nccl-tests "
             "all_reduce_perf, out-of-place busbw), https://github.com/coreweave/nccl-tests")
AZURE = ("Azure/AI-benchmarking-guide Azure_Results/ND_GB200_v6_results.md @2a370be (NCCL 2.25.1, AllReduce, Ring, "
         "in-place, 8 GB; run on one host of 4 GPUs per the maintainers in Azure/AI-benchmarking-guide#7)")


_READ: dict[tuple[str, tuple[int, int]], HostTopology] = {}


def rack(prefix: str = "tray", clique: int = 1, gpu: tuple[str, tuple[int, int]] = ("NVIDIA GB200", (10, 0)),
         trays: int = S.NVL72_TRAYS) -> list[HostTopology]:
    """A rack's hosts through the real readers (the trays are alike: one is read once, the others are it
    renamed, in fabric clique `clique`).  GB300 trays carry ConnectX-8 NICs (800 Gb/s, PCIe Gen6 x16)."""
    if gpu not in _READ:
        nic = {"nic_gbps": 800, "nic_pcie": (6, 6, 16, 16)} if "GB300" in gpu[0] else {}
        spec = S.nvl72_rack(prefix, gpu[0], gpu[1], trays=1, **nic)[0]
        with tempfile.TemporaryDirectory() as d:
            fake, root = S.materialise(spec, d)
            _READ[gpu] = gather_host_topology(fake, root, spec.host)
    first = _READ[gpu]
    gpus = [dataclasses.replace(g, fabric_clique_id=clique) for g in first.gpus]
    return [dataclasses.replace(first, host=f"{prefix}{t:02d}", gpus=gpus) for t in range(trays)]


def log_lines(nranks: int, nnodes: int, flag: int, warn: str = "") -> str:
    lines = [f"tray00:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks {nranks} nNodes {nnodes} localRanks "
             f"{nranks // nnodes} localRank 0 MNNVL {flag}"]
    if flag:
        lines.append(f"tray00:1:1 [0] NCCL INFO MNNVL 1 cliqueId 1 cliqueSize {nranks // nnodes} cliqueRank 0")
    if warn:
        lines.append(f"tray00:1:1 [0] mnnvl.cc:67 NCCL WARN {warn}")
    return "\n".join(lines)


@dataclasses.dataclass
class Case:
    name: str
    hosts: list[HostTopology]
    nranks: int
    nccl: str | None
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    log: str = ""
    algorithm: str | None = None
    published: list[tuple[int, float]] = dataclasses.field(default_factory=list)  # (size, busbw)
    source: str = ""
    note: str = ""


def cases() -> list[Case]:
    one = rack()
    two = one + rack("r2tray", clique=2)
    twenty = [h for r in range(20) for h in rack(f"r{r:02d}t", clique=r + 1)]
    gb300 = rack(gpu=("NVIDIA GB300", (10, 3)))
    gb300_two = gb300 + rack("r2tray", clique=2, gpu=("NVIDIA GB300", (10, 3)))
    big = rack("big", trays=1)[0]  # one host claiming all 72 GPUs: the old way to fake a rack
    big = dataclasses.replace(big, gpus=[dataclasses.replace(big.gpus[0], index=i) for i in range(72)])
    rack_pub = [(2 * GiB, 757.78), (4 * GiB, 839.16), (8 * GiB, 834.57)]
    return [
        Case("GB200 NVL72, 72 GPUs (NVML only)", one, 72, "2.26.2", published=rack_pub, source=COREWEAVE,
             note="NVLS predicted (algorithm not stated by the source)"),
        Case("GB200 NVL72, 72 GPUs (NCCL log: MNNVL 1, nNodes 1)", one, 72, "2.26.2",
             log=log_lines(72, 1, 1), published=rack_pub, source=COREWEAVE),
        Case("GB200 NVL72, 72 GPUs, NVLS off", one, 72, "2.28.9", env={"NCCL_NVLS_ENABLE": "0"},
             note="no published NVLS-off figure for a whole rack found"),
        Case("GB200 compute tray, 4 GPUs (one host)", one[:1], 4, "2.25.1", algorithm="Ring",
             published=[(8 * GiB, 679.61)], source=AZURE),
        Case("GB200, 2 racks = 144 GPUs (2 fabric cliques)", two, 144, "2.26.2",
             published=[(8 * GiB, 793.06), (16 * GiB, 810.41)], source=COREWEAVE + ", 2 Racks",
             note="two NVLink domains joined by InfiniBand, each rack one NCCL node: NCCL's NVLSTree, 32 channels "
                  "headed by a GPU with its own NIC, per channel min(NVLink 28.7, the heads' NICs 48 x 2, cap 96): "
                  "917.6, bound by NVLink within each rack; 114 MiB per rank at 16 GiB, the sweep still rising, and "
                  "no multi-rack healthy curve is recorded: not judged below the band"),
        Case("GB200, 20 racks = 1440 GPUs", twenty, 1440, "2.26.2",
             published=[(16 * GiB, 405.74)], source=COREWEAVE + ", 20 Racks",
             note="NCCL's model as for 2 racks (the heads' NICs at 48 GB/s a channel, x1 past 2 nodes, still above "
                  "the NVLink part's 28.7): 917.6; 405.7 is 44 % of it, which no term of NCCL's model reaches: the "
                  "fabric joining the racks (not stated by the source) or the ramp (+6 % from 8 to 16 GiB) binds: "
                  "not judged"),
        Case("GB200 NVL72, NCCL log MNNVL 0 + IMEX warning", one, 72, "2.28.9", env={"NCCL_ALGO": "Ring"},
             log=log_lines(72, 18, 0, "MNNVL (cliqueSize 72) is available but not working on this system. Check "
                                      "the IMEX channel configuration (/dev/nvidia-caps-imex-channels)."),
             note="NCCL joined the trays over their NICs: the ceiling follows what NCCL did"),
        Case("GB300 NVL72, 72 GPUs (NVML only)", gb300, 72, "2.28.9",
             note="no published GB300 NVL72 nccl-tests figure found (searched: NVIDIA/nccl and nccl-tests issues, "
                  "coreweave/nccl-tests, Azure AI-benchmarking-guide)"),
        Case("GB300, 2 racks = 144 GPUs (ConnectX-8 800G)", gb300_two, 144, "2.28.9",
             note="no published multi-rack GB300 figure found; the NVLS part (28.7 GB/s a channel) binds below either "
                  "NIC's plan (48 or 96), so 800G gives the 400G rack's 917.6"),
        Case("72 GPUs faked as one host (the old workaround), NVLS", [big], 72, "2.26.2", algorithm="NVLS",
             published=rack_pub, source=COREWEAVE,
             note="before: 721.8 x 0.74 x 2 x 71/73 = 1039 GB/s (continuous NVLS formula); now the same bounded "
                  "stepped figure as the rack"),
    ]


def evaluate(c: Case) -> dict:
    log = parse_nccl_log(c.log) if c.log else None
    kw = {"env": c.env, "nccl_version": c.nccl, "log": log}
    ceil = expected_ceiling(c.hosts, "all_reduce", c.nranks, algorithm=c.algorithm,
                            algorithm_source="published", **kw) if c.algorithm else \
        expected_ceiling(c.hosts, "all_reduce", c.nranks, **kw)
    plateau = None
    verdict = None
    if c.published:
        p = plateau_busbw(c.published)  # as a run's plateau is taken
        plateau = p.busbw
        v = judge(p, ceil)
        verdict = {"label": v.label, "fraction": v.fraction, "text": v.text}
    return {"case": c.name, "nranks": c.nranks, "hosts": len(c.hosts), "nccl": c.nccl, "env": c.env,
            "ceiling": ceil.to_dict(), "published": c.published, "plateau": plateau, "verdict": verdict,
            "source": c.source, "note": c.note}


def bounded_table() -> list[dict]:
    rows = []
    for label, gpu_bw, cc in (("Hopper, 18 x 20.6 = 370.8", 370.8, (9, 0)),
                              ("Blackwell, 18 x 40.1 = 721.8", 721.8, (10, 0))):
        eff = NVLS_EFFICIENCY[cc[0]]
        for n in (2, 4, 5, 7, 8, 16, 32, 36, 72, 144, 576):
            m, why = nvls_model(gpu_bw, n, cc)
            rows.append({"gpus": label, "n": n, "channels": m.channels if m else None,
                         "channel_bw": m.channel_bw if m else None, "busbw": m.busbw if m else None,
                         "why": why, "old_continuous": gpu_bw * eff * 2 * (n - 1) / (n + 1),
                         "limit": 2 * eff * gpu_bw})
    return rows


def render(results: list[dict], bounded: list[dict]) -> str:
    out = [
        "# Multi-node NVLink (GB200/GB300 NVL72): ceiling model vs published",
        "",
        f"Generated by `python bench/mnnvl_model.py` at commit {commit()} on "
        f"{datetime.date.today().isoformat()}, CPU only. Each rack is its real trays (18 hosts x 4 GPUs, "
        "18 NVLink5 links x 50 GB/s = 900 GB/s per GPU per direction, 1.8 TB/s both ways, 4x 400G IB per tray, "
        "one NVLink fabric clique), materialised as fake NVML + sysfs and read back by the real readers; the "
        "ceiling is `expected_ceiling`, as for a run. Nothing is fitted to the published figures.",
        "",
        "| # | case | ranks | NCCL | NVLink domain | algorithm | ceiling GB/s | published plateau GB/s | "
        "published / ceiling | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(results, 1):
        c = Ceiling.from_dict(r["ceiling"])
        dom = c.nvlink_domain.split(";")[0] if c.nvlink_domain else "one host"
        ceil = fmt_gbps(c.ceiling) if c.ceiling is not None else "not judged"
        pub = fmt_gbps(r["plateau"]) if r["plateau"] is not None else "none found"
        frac = (f"{100 * r['plateau'] / c.ceiling:.1f} %" if r["plateau"] is not None and c.ceiling else "-")
        verdict = r["verdict"]["label"] if r["verdict"] else "-"
        algo = f"{c.algorithm} ({c.algorithm_source})" if c.algorithm else "-"
        out.append(f"| {i} | {r['case']} | {r['nranks']} | {r['nccl'] or '?'} | {dom} | {algo} | {ceil} | {pub} | "
                   f"{frac} | {verdict} |")
    out += ["", "Published plateau: the median busbw of the published sizes within a factor 4 of the largest "
            "(`verdict.plateau_busbw`, as a run's plateau is taken).", "", "## Sources, notes and reasoning", ""]
    for i, r in enumerate(results, 1):
        c = Ceiling.from_dict(r["ceiling"])
        sizes = ", ".join(f"{s // GiB} GiB: {b}" for s, b in r["published"])
        out.append(f"{i}. **{r['case']}**" + (f" Published ({sizes}): {r['source']}." if r["published"] else "")
                   + (f" Note: {r['note']}." if r["note"] else ""))
        out.append(f"   - domain: {c.nvlink_domain or '(one host)'}")
        out.append(f"   - {'why: ' + c.reasoning if c.ceiling is not None else 'not judged: ' + c.unknown}")
    out += ["", "## The NVLS model is bounded in the GPU count", "",
            "`nccl_bandwidth.nvls_model`: nCh = min(32, GPUs) channels (NCCL_MAX_NVLS_ARITY), the channel speed the "
            "largest of NCCL's intra speeds with (nCh+1) x speed within the GPU's switch link and nCh x speed "
            "within n/(n-1) of it, busbw = nCh x speed x efficiency x (nCh-1)/nCh x 2. The old sizer's "
            "continuous form is shown beside it.", "",
            "| GPU link (NCCL's model) | GPUs | channels | GB/s per channel | NVLS busbw | old continuous | "
            "2 x eff x link |", "|---|---|---|---|---|---|---|"]
    for b in bounded:
        busbw = fmt_gbps(b["busbw"]) if b["busbw"] is not None else f"none ({b['why']})"
        out.append(f"| {b['gpus']} | {b['n']} | {b['channels'] or '-'} | "
                   f"{fmt_gbps(b['channel_bw']) if b['channel_bw'] else '-'} | {busbw} | "
                   f"{fmt_gbps(b['old_continuous'])} | {fmt_gbps(b['limit'])} |")
    out += ["", "## What is not modelled, and why", "",
            "- Several NVLink domains joined by a network (2+ racks, or NVL partitions) are modelled as NCCL models "
            "them (each domain one node of all its GPUs; NVLSTree: `nccl_bandwidth.nvls_tree_model`, 32 NVLS channels "
            "each headed by a GPU with its own NIC, per channel min(NVLink part, the heads' NICs x 2 on 2 nodes, "
            "NCCL's cap); Ring: min(the GPU's NVLink, the domain's NICs)). NCCL's model has no term for the fabric "
            "that joins the domains (switch tiers, oversubscription), nor do the facts ncclbench reads, and no "
            "healthy multi-rack curve is recorded: below the band with less than 1 GiB per rank they are not "
            "judged (rows 5-6: the model is 14 % and 126 % above the published figures, 114 MiB and 11 MiB per "
            "rank); PXN and the rail layout are not in the facts either.",
            "- GB300 NVL72: no published nccl-tests figure was found; the model treats it as GB200 (same "
            "NVLink5 links, NCCL's SM100 constants for cc 10.3) with ConnectX-8 800G NICs, which do not bind NCCL's "
            "NVLSTree figure (its NVLS part, 28.7 GB/s a channel, does).",
            "- NCCL < 2.28.3 sized NVLS and NVLSTree differently in its own table (no nvlsEfficiency, no "
            "NVLSTree cap; x 5/6): ncclbench uses the 2.28.3+ figure for every version.",
            ""]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "bench/results/mnnvl-model-2026-11-26"),
                    help="write OUT.md and OUT.json")
    args = ap.parse_args(argv)
    results = [evaluate(c) for c in cases()]
    bounded = bounded_table()
    text = render(results, bounded)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out + ".md").write_text(text)
    meta = {"command": "python bench/mnnvl_model.py", "commit": commit(short=False),
            "date": datetime.date.today().isoformat()}
    Path(args.out + ".json").write_text(json.dumps({"meta": meta, "cases": results, "nvls_bounded": bounded},
                                                   indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`ncclbench topo`: this host's topology facts, without running a collective.

What the benchmark reads at start and judges every run against (GPUs,
NVLink links and their rates, PCIe links, NICs from sysfs, GPUDirect RDMA,
NUMA; `explain.gather_topology`), shown as the banner's two lines and then device by
device; every fact NVML or sysfs would not give is listed as unknown with
the reason.  For every host of a job, run `ncclbench preflight` under the
job's launcher: it prints the same banner lines per host.
"""

from __future__ import annotations

import argparse
import json

from ..core.errors import BenchError, ExitCode
from .base import CommandParser

NAME = "topo"
HELP = "this host's topology facts (GPUs, NVLink, PCIe, NICs, GPUDirect RDMA, NUMA) without collectives"


def add_arguments(parser: CommandParser) -> None:
    parser.add_argument("--json", dest="json_path", metavar="FILE", help="also write the facts as JSON to FILE")
    parser.add_argument("--root", default="/", metavar="DIR",
                        help="where /sys and /proc are (default /; e.g. a host's sysfs mounted in a container)")


def run(args: argparse.Namespace) -> int:
    from ..explain.gather_topology import gather_host_topology
    from ..explain.topology import format_topology_lines, format_topology_report

    facts = gather_host_topology(root=args.root)
    print("\n".join(format_topology_lines([facts]) + format_topology_report(facts)), flush=True)
    if args.json_path:
        try:
            with open(args.json_path, "w") as f:
                json.dump(facts.to_dict(), f, indent=1)
        except OSError as exc:
            raise BenchError(f"topo: cannot write {args.json_path}: {exc.strerror or exc}",
                             ExitCode.INVALID_USAGE) from None
    return 0

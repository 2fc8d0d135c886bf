"""How each tuning-relevant NCCL variable is read, per release, from NCCL's source.

P: an NCCL_PARAM (src/include/param.h): read once per process and cached
   (`static int64_t cache`), whatever later communicators are made with.
G: a direct getenv/ncclGetEnv call at the point of use (re-read each time
   that code runs, e.g. at every communicator init).
.: not read by that release.

Run: python bench/tune_nccl_env_scan.py GIT_DIR [TAG ...]
     (GIT_DIR: a bare mirror of NVIDIA/nccl; docs/tuning.md has the table
     this printed for v2.18.6-1 .. v2.30.7-1)
"""

from __future__ import annotations

import re
import subprocess
import sys

VARS = ["ALGO", "PROTO", "MIN_NCHANNELS", "MAX_NCHANNELS", "MIN_CTAS", "MAX_CTAS", "NTHREADS", "LL128_NTHREADS",
        "BUFFSIZE", "LL_BUFFSIZE", "LL128_BUFFSIZE", "NVLS_ENABLE", "NVLS_NCHANNELS", "PAT_ENABLE", "CTA_POLICY",
        "CGA_CLUSTER_SIZE", "COLLNET_ENABLE", "NCHANNELS_PER_NET_PEER", "MIN_P2P_NCHANNELS", "MAX_P2P_NCHANNELS",
        "NET", "TUNER_PLUGIN", "SHM_DISABLE", "NVLINK_UTIL_CENTRIC_SCHED_ENABLE", "GRAPH_REGISTER"]
TAGS = ["v2.18.6-1", "v2.19.4-1", "v2.20.5-1", "v2.21.5-1", "v2.22.3-1", "v2.23.4-1", "v2.24.3-1", "v2.25.1-1",
        "v2.26.6-1", "v2.27.7-1", "v2.28.9-1", "v2.29.7-1", "v2.30.7-1"]


def grep(git_dir: str, tag: str, pattern: str) -> bool:
    p = subprocess.run(["git", "--git-dir", git_dir, "grep", "-q", "-E", pattern, tag, "--", "src"])
    return p.returncode == 0


def scan(git_dir: str, tags: list[str]) -> dict[str, list[str]]:
    table = {}
    for var in VARS:
        row = []
        for tag in tags:
            param = grep(git_dir, tag, rf'NCCL_PARAM\([A-Za-z0-9]+, *"{re.escape(var)}"')
            direct = grep(git_dir, tag, rf'(getenv|ncclGetEnv)\("NCCL_{re.escape(var)}"\)')
            row.append(("P" if param else "") + ("G" if direct else "") or ".")
        table[var] = row
    return table


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tags = sys.argv[2:] or TAGS
    table = scan(sys.argv[1], tags)
    print("| variable | " + " | ".join(t[1:].rsplit("-", 1)[0] for t in tags) + " |")
    print("|---|" + "---|" * len(tags))
    for var, row in table.items():
        print(f"| NCCL_{var} | " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A rank started by the launch tests (`python -m spawn_child MODE ...`): joins the job the
way ncclbench does (detect_launch + make_host_comm) and then follows MODE.

ok                 print "rank R of N via KIND/HOSTCOMM CUDA_VISIBLE_DEVICES=..." on stdout
fail R CODE        rank R exits with CODE right after the job forms (no goodbye)
fail-hang R CODE   rank R exits with CODE; all other ranks sleep without touching the comm
"""

import os
import sys
import time

from ncclbench.core.errors import BenchError
from ncclbench.launch import detect_launch, host_comm_name, make_host_comm


def main(argv: list[str]) -> int:
    mode = argv[0] if argv else "ok"
    info = detect_launch()
    try:
        comm = make_host_comm(info, 10)
        print(f"rank {comm.rank} of {comm.size} via {info.kind}/{host_comm_name(comm)} "
              f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}", flush=True)
        sys.stderr.write(f"stderr line from rank {comm.rank}\n")
        if mode in ("fail", "fail-hang"):
            if comm.rank == int(argv[1]):
                os._exit(int(argv[2]))
            if mode == "fail-hang":
                time.sleep(600)
        comm.barrier()
        comm.close()
        return 0
    except BenchError as e:
        print(f"rank {info.rank}: {e.message}", file=sys.stderr, flush=True)
        return int(e.code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

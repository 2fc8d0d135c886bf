"""A rank of the closed-pipe test (`python -m pipe_child`): joins the job the way ncclbench
does; rank 0 writes result lines until its stdout's reader leaves, then ends as ncclbench's
dispatcher does on a BrokenPipeError (exit 0); the others wait for rank 0 in the job and
end when it is gone, as ranks of a collective would."""

import os
import sys
import time

from ncclbench.core.errors import BenchError
from ncclbench.launch import detect_launch, make_host_comm


def main() -> int:
    info = detect_launch()
    try:
        comm = make_host_comm(info, 10)
        if comm.rank == 0:
            try:
                for i in range(100000):
                    print(f"{8 << i % 20:>12} result row {i}", flush=True)
                    time.sleep(0.01)
            except BrokenPipeError:
                os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # no second error at exit
            return 0
        comm.barrier()  # never answered: rank 0 leaves when its pipe closes
        return 0
    except BenchError as e:
        print(f"rank {info.rank}: {e.message}", file=sys.stderr, flush=True)
        return int(e.code)


if __name__ == "__main__":
    sys.exit(main())

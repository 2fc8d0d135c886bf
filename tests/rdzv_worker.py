"""A rank for the rendezvous tests: forms a job through TcpHostComm and runs a scenario.

Run as `python rdzv_worker.py RANK SIZE ADDR PORT TOKEN TIMEOUT SCENARIO`; prints one JSON
line with what it saw, or `ERROR <code> <message>` and exits with the BenchError code.
"""

import json
import os
import sys
import time

from ncclbench.core.errors import BenchError
from ncclbench.launch.rendezvous import TcpHostComm


def main() -> int:
    rank, size, addr, port, token, timeout, scenario = sys.argv[1:8]
    rank, size, port, timeout = int(rank), int(size), int(port), float(timeout)
    t0 = time.monotonic()
    try:
        comm = TcpHostComm(rank, size, addr, port, token, timeout, heartbeat_s=0.5)
        uid = comm.bcast(os.urandom(128) if rank == 0 else None, 0)
        gathered = comm.gather({"rank": rank, "pid": os.getpid()}, 0)
        comm.barrier()
        total = comm.allreduce(rank + 1, "sum")
        lo = comm.allreduce(rank + 1, "min")
        hi = comm.allreduce(rank + 1, "max")
        everyone = comm.allgather(rank * 10)
        sub = comm.split(rank % 2, -rank)
        sub_sum = sub.allreduce(rank, "sum")
        sub_ranks = sub.allgather(rank)
        root_last = comm.gather(rank, size - 1)
        if scenario in ("die", "callback") and rank == size - 1:
            os._exit(9)  # killed mid-run: no goodbye
        if scenario == "callback":
            # the others sit in a long wait outside any host operation (like a device wait);
            # the failure callback must end them, not the next operation
            def on_failure(err):
                print(f"CALLBACK {int(err.code)} {err.message}", flush=True)
                print(f"elapsed {time.monotonic() - t0:.3f}", flush=True)
                os._exit(int(err.code))

            comm.add_failure_callback(on_failure)
            time.sleep(60)
        if scenario in ("die", "hang"):
            if scenario == "hang" and rank == size - 1:
                time.sleep(3600)
            comm.barrier()
        comm.close()
        print(json.dumps({"rank": rank, "uid": uid.hex(), "gathered": gathered, "sum": total, "min": lo,
                          "max": hi, "all": everyone, "sub_size": sub.size, "sub_rank": sub.rank,
                          "sub_sum": sub_sum, "sub_ranks": sub_ranks, "root_last": root_last,
                          "elapsed": time.monotonic() - t0}), flush=True)
        return 0
    except BenchError as e:
        print(f"ERROR {int(e.code)} {e.message}", flush=True)
        print(f"elapsed {time.monotonic() - t0:.3f}", flush=True)
        return int(e.code)


if __name__ == "__main__":
    sys.exit(main())

"""An MPI job for the namespace test: allreduce of 1 MiB float32 per rank, checked."""

import socket
import sys

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
send = np.full(1 << 18, comm.rank + 1, dtype=np.float32)
recv = np.empty_like(send)
comm.Allreduce(send, recv, op=MPI.SUM)
expected = comm.size * (comm.size + 1) / 2
ok = bool(np.all(recv == expected))
rows = comm.gather((comm.rank, socket.gethostname(), ok), 0)
if comm.rank == 0:
    for r, host, good in rows:
        print(f"rank {r} host {host} allreduce {'ok' if good else 'WRONG'}", flush=True)
sys.exit(0 if ok else 7)

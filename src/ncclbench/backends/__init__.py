"""Backends layer: the Worker the run layer drives, for NCCL on GPUs and MPI on host memory."""

"""Tools layer: `ncclbench tune`, NCCL/MPICH settings timed against the default by the run layer."""

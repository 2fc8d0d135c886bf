"""Health's runtime: control channel, coordinator, MPI/NCCL groups; drives core, writes outputs."""

"""Tools layer: one benchmark as nccl-tests runs it (this host's ranks started, or one rank here)."""

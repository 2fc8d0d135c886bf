"""Platform layer: the libnccl binding, the timed loop's call paths and its C loop, for the backends."""

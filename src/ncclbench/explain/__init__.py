"""Judging a run: what the hardware allows, what NCCL did, and the traps that make clusters slow.

Library code only (no command wiring here): what NCCL said it did (`nccl_log`,
read from logs captured phase by phase by `log_capture`, or per call from the
optional profiler plugin through `profiler`), topology facts read from NVML and sysfs (`topology`, `nvml_reader`,
`sysfs_reader`, gathered by `gather_topology`; `ncclbench.simulation.hosts` fakes a host for tests), the
expected ceiling per collective from NCCL's own bandwidth model (`ceiling`), a
verdict on a measured plateau (`plateau_verdict`), and named traps with evidence and
a fix (`traps`).  Every fact may be unknown, and then says why.
"""

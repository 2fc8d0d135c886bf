"""`ncclbench health`: find the slow GPU, node, NIC rail or link of a fleet in one job.

The pure core (no MPI, no GPU) is what the scan runs and what the simulator
drives: `fleet` (which ranks sit on which host), `schedule` (phases as
disjoint groups that run at the same time), `judge` (robust fleet statistics
and the verdict of one round), `localize` (the rounds that pin a fault to a
GPU, a node, a NIC rail or a link) and `findings` (what is reported, with
the evidence that led to it).  `ncclbench.simulation.fabric` drives the same code
with a simulated fabric; `runtime` drives it with real communicators.
"""

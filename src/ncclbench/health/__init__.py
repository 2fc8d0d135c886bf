"""`ncclbench health`: find the slow GPU, node, NIC rail or link of a fleet in one job.

Three folders, each importing only the ones listed after it:

* `runtime/` - the scan for real: the protocol between the coordinator and the ranks
  (`messages`: every message kind, typed, with its wire form), the control channel
  (`control_channel`), the coordinator (`coordinate`), the ranks' side of each round (`live_rounds`), one group's
  measurement (`group_measure`, on MPI `mpi_group`, on GPUs `nccl_group`), the ways to
  start a scan (`scan_service`) and what runs after it (`after_scan`);
* `outputs/` - what a scan writes and reads back: the verdict table, JSON and drain
  list (`scan_output`), the drain actions (`drain`), the baseline file (`baseline_file`);
* `core/` - the pure core (no MPI, no GPU), what the scan runs and what the simulator
  drives: `fleet` (which ranks sit on which host), `scan_schedule` (phases as disjoint
  groups that run at the same time), `round_judge` (robust fleet statistics and the
  verdict of one round), `localize` and `pair_phase` (the rounds that pin a fault to a
  GPU, a node, a NIC rail or a link), `crowding` and `sharing` (when figures are
  comparable) and `scan` (the phases in order, to one report).

What a scan reports - one finding per faulty component, with the evidence that led to
it - is `findings`; the words a finding names its component with are in
`ncclbench.output.health_fields`, below the tools, as the metrics and JUnit outputs read
a stored scan's findings too.

`ncclbench.simulation.fabric` drives the core with a simulated fabric; `runtime/` drives it
with real communicators.
"""

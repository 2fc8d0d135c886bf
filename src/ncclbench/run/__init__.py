"""Run layer: a run's plan, nccl-tests' options, and the harness that times the plan on any workers."""

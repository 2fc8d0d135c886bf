"""Health's pure core (no MPI, no GPU): schedule, judgement, localization; the simulator's too."""

"""Simulators and fakes: hosts and fabrics that are not here, for tests and bench/ scripts.

Nothing in the runtime package imports this package (`tests/test_import_graph.py`
checks it): a simulator may import the code it drives, never the reverse.
`hosts` materialises a described host as a fake NVML module and a fake sysfs
tree for the topology readers; `fabric` is a simulated fleet for the health
scan's schedule, judgement and localization, with a time model of its rounds.
"""

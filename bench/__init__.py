"""Benchmarks of grove-temporal on the real local stack (issue 6): B1 gate-release latency against a measured
floor, B2 termination accuracy, B3 scale, B4 idle cost, B5 crash recovery.

Every figure is measured in the run that reports it; the JSON result carries the machine, the versions, the git
commit and the exact command line. `grove-temporal bench SCENARIO` is the entry point (bench/command.py).
"""

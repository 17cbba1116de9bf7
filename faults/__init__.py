"""Seeded fault runs (issue 7, deliverable 1): the real local stack, a real worker process and a set of
PodCliqueSets in every phase, hit round after round by faults drawn from `random.Random(seed)` — worker SIGKILL,
Temporal dev server restart (file-backed database), kube-apiserver outages while deadlines are pending, lost KWOK
nodes — and checked after each round against the invariants of DESIGN §4.5 from the real objects and the workflow
histories, never from our own status mirror.

`grove-temporal faults --seed N --rounds K` is the entry point (faults/command.py); faults.runner does the
work, faults.invariants holds the checks.
"""

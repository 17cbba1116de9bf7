"""What happens in each round, drawn from `random.Random(seed)` before the round runs: which pods fail (or pass)
their readiness probe and when, and which faults hit when and for how long. Pure: the same seed and settings give
the same plan (timings in the run itself still depend on a shared, noisy machine).

Every round has one primary fault; the primaries cycle through all kinds (node loss first in each cycle: its pods
take ~60 s to go, so the later rounds of a short run see them go and come back), and any other kind joins a round
with `extra_fault_probability`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

WORKER_KILL = "worker-kill"
TEMPORAL_RESTART = "temporal-restart"
APISERVER_OUTAGE = "apiserver-outage"
NODE_LOSS = "node-loss"
FAULT_KINDS = (NODE_LOSS, WORKER_KILL, TEMPORAL_RESTART, APISERVER_OUTAGE)
# Opt-in kinds (`--fault-kinds`): left out of the default so that a seed plays the rounds it played before they existed.
ETCD_RESTART = "etcd-restart"  # etcd stopped (SIGTERM) and started on the same data: kube-apiserver stays up
# One worker's packets to kube-apiserver / to Temporal dropped for a while (faults/partition.py), the rest reachable.
PARTITION_APISERVER = "partition-apiserver"
PARTITION_TEMPORAL = "partition-temporal"
PARTITIONS = (PARTITION_APISERVER, PARTITION_TEMPORAL)
OPTIONAL_FAULT_KINDS = (ETCD_RESTART, *PARTITIONS)
ALL_FAULT_KINDS = (*FAULT_KINDS, *OPTIONAL_FAULT_KINDS)

BREAK = "break"
HEAL = "heal"
# What an HPA does to a scale subresource (DESIGN §4.10): up for a burst, then back to the template's count within
# the round, so every settled check still compares with the template's plan.
SCALE = "hpa-scale"
# A user's edit of a PCS template (issue 12): a new container image, or a new env var value, in every clique; the
# rolling update then runs under the round's other faults.
TEMPLATE_CHANGE = "template-change"
CHANGE_IMAGE = "image"
CHANGE_ENV = "env"


@dataclass(frozen=True)
class Settings:
    round_seconds: float = 20.0  # the window in which steps happen; then the quiet period
    readiness_steps: tuple[int, int] = (3, 6)
    extra_fault_probability: float = 0.2
    worker_dead_seconds: tuple[float, float] = (0.5, 5.0)
    # up to beyond the ~10 s a Temporal client retries a call: what a slow restart does to whoever calls meanwhile
    temporal_down_seconds: tuple[float, float] = (0.0, 15.0)
    apiserver_down_seconds: tuple[float, float] = (5.0, 30.0)
    # how long a flapping pod stays NotReady, per PCS: shorter than its delay, so the breach heals in time (mostly)
    flap_hold_seconds: dict[str, tuple[float, float]] = field(default_factory=lambda: {"slow": (1.0, 8.0)})
    scale_probability: float = 0.5  # a round also scales one PCSG or PodClique up and back (SCALE)
    scale_hold_seconds: tuple[float, float] = (2.0, 8.0)
    template_change_probability: float = 0.0  # a round also changes one PCS's template (TEMPLATE_CHANGE)
    fault_kinds: tuple[str, ...] = FAULT_KINDS  # what the primaries cycle through (node loss, if present, first)
    etcd_down_seconds: tuple[float, float] = (1.0, 10.0)
    # Worker processes on the task queue (each leader-elects the watcher); a worker kill hits one of them. With one,
    # no draw picks it, so single-worker seeds play the rounds they played before there could be more.
    workers: int = 1
    # The last worker's wall clock runs this many seconds off (faults/skewed_worker.py): 0 for none.
    worker_clock_skew_seconds: float = 0.0
    # past the 30 s the worker's Kubernetes client waits for an answer, so some requests hang until their timeout
    partition_seconds: tuple[float, float] = (5.0, 40.0)


@dataclass(frozen=True)
class Step:
    at: float  # seconds into the round
    action: str  # break | heal | one of ALL_FAULT_KINDS
    pod: str | None = None  # break/heal
    candidates: tuple[str, ...] = ()  # apiserver-outage: pods to break first (the first Ready one) for a deadline
    seconds: float = 0.0  # how long the component stays down (worker, Temporal, kube-apiserver)
    pick: float = 0.0  # node-loss: which of the candidate nodes, as a fraction
    target: tuple[str, str] | None = None  # hpa-scale: (kind, object name)
    replicas: int = 0  # hpa-scale: the count written to the scale subresource
    pcs: str | None = None  # template-change: which PodCliqueSet
    change: str = ""  # template-change: CHANGE_IMAGE | CHANGE_ENV
    worker: int = 0  # worker-kill, partition-*: which worker process (0: the first)

    def describe(self) -> str:
        parts = [f"{self.at:5.1f}s {self.action}"]
        if self.pod:
            parts.append(self.pod)
        if self.pcs:
            parts.append(f"{self.pcs} ({self.change})")
        if self.target:
            parts.append(f"{self.target[0]}/{self.target[1]} → {self.replicas}")
        if self.action in (WORKER_KILL, *PARTITIONS) and self.worker:
            parts.append(f"worker {self.worker + 1}")
        if self.seconds:
            parts.append(f"{self.seconds:.1f}s")
        return " ".join(parts)


def still_broken(before: set[str], steps: list[Step]) -> set[str]:
    """The pods left NotReady once a round's steps have run in time order. Steps are drawn in a random order and
    sorted by time afterwards, so a heal drawn after a break of the same pod may come before it (seed 23, round 10:
    heal at 4.2 s, break at 9.5 s): counting in draw order forgot a pod that ended the round broken, and the quiet
    period never healed it where a rollout waited on it."""
    broken = set(before)
    for step in steps:
        if step.action == BREAK and step.pod:
            broken.add(step.pod)
        elif step.action == HEAL and step.pod:
            broken.discard(step.pod)
    return broken


@dataclass
class Planner:
    rng: random.Random
    breakable: dict[str, list[str]]  # PCS -> its pod names that may be made to fail readiness
    deadline_pods: list[str]  # pods whose breach keeps a deadline pending for a while (the `slow` PCS)
    settings: Settings = field(default_factory=Settings)
    scalable: tuple[tuple[str, str, int], ...] = ()  # (kind, object name, template count) an HPA may scale
    changeable: tuple[str, ...] = ()  # PCSes whose template a user may change (a rolling update follows)
    broken: set[str] = field(default_factory=set)  # what this planner has broken and not yet healed
    _cycle: list[str] = field(default_factory=list)

    def primary(self) -> str:
        if not self._cycle:
            kinds = self.settings.fault_kinds
            rest = [k for k in kinds if k != NODE_LOSS]
            self.rng.shuffle(rest)
            self._cycle = [NODE_LOSS, *rest] if NODE_LOSS in kinds else rest
        return self._cycle.pop(0)

    def _pick_worker(self) -> int:
        """Which worker a kill or partition hits; drawn only when there is a choice, so single-worker seeds replay."""
        return self.rng.randrange(self.settings.workers) if self.settings.workers > 1 else 0

    def plan_round(self) -> list[Step]:
        s, rng = self.settings, self.rng
        window = s.round_seconds
        kinds = [self.primary()]
        kinds += [k for k in s.fault_kinds if k not in kinds and rng.random() < s.extra_fault_probability]
        steps: list[Step] = []
        for kind in kinds:
            at = rng.uniform(1.0, max(1.5, window - 4.0))
            if kind == WORKER_KILL:
                seconds = rng.uniform(*s.worker_dead_seconds)
                steps.append(Step(at, kind, seconds=seconds, worker=self._pick_worker()))
            elif kind == TEMPORAL_RESTART:
                steps.append(Step(at, kind, seconds=rng.uniform(*s.temporal_down_seconds)))
            elif kind in PARTITIONS:
                seconds = rng.uniform(*s.partition_seconds)
                steps.append(Step(at, kind, seconds=seconds, worker=self._pick_worker()))
            elif kind == ETCD_RESTART:
                steps.append(Step(at, kind, seconds=rng.uniform(*s.etcd_down_seconds)))
            elif kind == APISERVER_OUTAGE:
                candidates = list(self.deadline_pods)
                rng.shuffle(candidates)
                steps.append(Step(at, kind, candidates=tuple(candidates),
                                  seconds=rng.uniform(*s.apiserver_down_seconds)))
            else:
                steps.append(Step(at, kind, pick=rng.random()))
        pcses = sorted(self.breakable)
        broken_before = set(self.broken)
        for _ in range(rng.randint(*s.readiness_steps)):
            at = rng.uniform(0.0, window)
            action = rng.choices(("break", "heal", "flap"), weights=(5, 3, 2))[0]
            if action == HEAL and self.broken:
                pod = rng.choice(sorted(self.broken))
                self.broken.discard(pod)
                steps.append(Step(at, HEAL, pod=pod))
                continue
            pcs = rng.choice(pcses)
            pod = rng.choice(self.breakable[pcs])
            steps.append(Step(at, BREAK, pod=pod))
            if action == "flap":
                hold = rng.uniform(*s.flap_hold_seconds.get(pcs, (0.5, 2.5)))
                steps.append(Step(at + hold, HEAL, pod=pod))
            else:
                self.broken.add(pod)
        if self.scalable and rng.random() < s.scale_probability:
            kind, name, template = self.scalable[rng.randrange(len(self.scalable))]
            up = rng.uniform(0.0, window / 2)
            back = min(up + rng.uniform(*s.scale_hold_seconds), window)
            steps.append(Step(up, SCALE, target=(kind, name), replicas=template + rng.randint(1, 2)))
            steps.append(Step(back, SCALE, target=(kind, name), replicas=template))
        # Drawn only when template changes are on, so that runs without them replay the seeds of earlier runs.
        if self.changeable and rng.random() < s.template_change_probability:
            pcs = self.changeable[rng.randrange(len(self.changeable))]
            change = rng.choice((CHANGE_IMAGE, CHANGE_ENV))
            steps.append(Step(rng.uniform(0.0, window / 2), TEMPLATE_CHANGE, pcs=pcs, change=change))
        ordered = sorted(steps, key=lambda step: step.at)
        self.broken = still_broken(broken_before, ordered)
        return ordered

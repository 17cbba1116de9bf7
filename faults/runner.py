"""One seeded fault run: stack, worker, workload, rounds of faults, a quiet period and the checks after each.

    start the local stack (Temporal on a SQLite file), a `grove-temporal worker` process, our watch recorder
    create the workload (faults.workload) and wait until every replica is where it should be; pause `paused`;
    plant foreign objects
    repeat K times:
        steps of the round (faults.schedule, from the seed) — readiness changes and faults, at their moments
        quiet: wait until the objects match the plan and no breach the workflow knows of is left (or time out)
        check every invariant (faults.invariants) over everything recorded so far
    final: wait for lost nodes' pods to be gone and replaced, settle, check again

Violations are keyed, so one fault found again in later rounds counts once.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import platform
import random
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

from kubernetes.client import CoreV1Api
from temporalio.client import Client, WorkflowQueryFailedError
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from temporalio.worker import Replayer

from activities.kubeapi import (
    EVENTS,
    JSON,
    PODCLIQUES,
    PODCLIQUESETS,
    PODGANGS,
    PODS,
    SCALINGGROUPS,
    SERVICES,
    Kube,
    KubeError,
    Resource,
)
from faults import diagnose, invariants, rollout_invariants, schedule
from faults.history import HistoryReader, WorkflowDigest
from faults.injector import NODES, PROTECTED_NODE, RUNNER_FIELD_MANAGER, Injector, worker_argv
from faults.invariants import Findings, LiveObjects, ReplicaKey, Violation
from faults.partition import Partitions
from faults.recorder import Recorder
from faults.workload import FOREIGN_MARK, Workload, foreign_objects
from localstack import rundirs
from localstack.processes import ManagedProcess
from localstack.stack import LocalStack
from worker.app import WORKFLOWS
from workflows.contract import PAUSE, STATUS_QUERY, replica_workflow_id
from workflows.messages import ControlResult, PauseRequest, Phase, ReplicaStatus
from workflows.nudge_versions import NudgeVersionsInterceptor

REPO = Path(__file__).resolve().parents[1]
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
# Counts that each check recomputes over the whole run (report the last); the others are summed over rounds.
CUMULATIVE = {"terminations_checked", "deletions_checked", "pclq_deletions_seen", "gang_terminated_events",
              "scaled_releases_checked", "pclq_rollout_deletions_seen", "pclq_scaled_in_seen",
              "rollout_pod_deletions_checked", "rollout_max_units_down", "rollout_max_replicas_down",
              "deletion_decisions_checked"}
BUSY_PHASES = {Phase.PENDING, Phase.CREATING, Phase.TERMINATING}


@dataclass
class Options:
    seed: int
    rounds: int
    replicas: int = 2
    settings: schedule.Settings = field(default_factory=schedule.Settings)
    settle_timeout: float = 180.0
    missing_grace: float = 30.0  # beyond 2 x delay, how long a known breach may stay before it counts as missing
    out_dir: Path = REPO / "fault-results"
    log: Callable[[str], None] = print


class PartitionsUnavailable(RuntimeError):
    """A partition fault kind was asked for where this machine cannot make partitions."""


@dataclass
class RoundReport:
    index: int
    steps: list[str]
    settle_seconds: float
    settled: bool
    unsettled: list[str]
    new_violations: int


class FaultRun:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.log = options.log
        self.rng = random.Random(options.seed)
        self.namespace = f"faults-{options.seed}"
        self.workload = Workload(self.namespace, options.replicas)
        self.task_queue = f"faults-{options.seed}"
        self.violations: dict[str, tuple[int, Violation]] = {}
        self.summed: Counter[str] = Counter()
        self.last: dict[str, int] = {}
        self.lateness: list[invariants.LateDeletion] = []
        self.rounds: list[RoundReport] = []
        self.phases_seen: Counter[str] = Counter()
        self.statuses: dict[ReplicaKey, ReplicaStatus] = {}
        self.foreign_before: dict[str, JSON] = {}
        self.component_exits: list[dict[str, Any]] = []
        self.workers: list[ManagedProcess] = []

    # --- the run ---------------------------------------------------------------------------------------------------
    async def run(self) -> dict[str, Any]:
        from localstack.crds import apply_crds
        from localstack.stack import StackOptions

        began = time.monotonic()
        # Our own clients retry every request during the outages we cause; their warnings would drown the report.
        logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
        partitions = self._partitions()  # refused before anything starts where none can be made
        run_dir = rundirs.new_run_dir()
        stack = LocalStack(StackOptions(nodes=3, run_dir=run_dir, temporal_db_file=run_dir / "temporal-db" / "db",
                                        headless_ui=True), log=self.log)
        self.run_dir = run_dir
        self.stack = stack
        stack.start()
        recorder: Recorder | None = None
        poller: asyncio.Task[None] | None = None
        try:
            api_client = stack.kube_client()
            apply_crds(api_client)
            self.kube = Kube(api_client, timeout=30.0)  # the harness's, not the product's 10 s of silence
            self.kube.create(Resource("", "v1", "namespaces", "Namespace", namespaced=False), None,
                             {"metadata": {"name": self.namespace}})
            await asyncio.to_thread(self._wait_service_account)
            self.client = await Client.connect(stack.temporal_address, data_converter=pydantic_data_converter)
            self.histories = HistoryReader(self.client)
            self.replayer = Replayer(workflows=WORKFLOWS, data_converter=pydantic_data_converter,
                                     interceptors=[NudgeVersionsInterceptor()])
            count = self.options.settings.workers
            for number in range(1, count + 1):
                name = "worker" if number == 1 else f"worker-{number}"
                skew = self.options.settings.worker_clock_skew_seconds if number == count else 0.0
                argv = worker_argv(stack.kubeconfig, stack.temporal_address, self.namespace, self.task_queue, skew)
                if partitions is not None:
                    argv = partitions.wrap(name, argv)
                self.workers.append(stack.spawn(name, argv))
            recorder = Recorder(lambda: Kube(stack.kube_client()), self.namespace).start()
            self.recorder = recorder
            await self._create_workload()
            poller = asyncio.create_task(self._poll_statuses())
            injector = Injector(stack, self.kube, self.namespace, self.workers, self._deadline_pending, self.log,
                                partitions=partitions)
            self.injector = injector
            self.breakable = self._breakable_pods()
            planner = schedule.Planner(self.rng, self.breakable, self._pods_of("slow"), self.options.settings,
                                       scalable=self._scalable(), changeable=self._changeable())
            self.planner = planner
            for index in range(1, self.options.rounds + 1):
                await self._revive_components(stack, index)
                steps = planner.plan_round()
                self.log(f"round {index}/{self.options.rounds}: "
                         f"{', '.join(s.action for s in steps if s.action in schedule.ALL_FAULT_KINDS)}")
                await injector.run(steps, time.monotonic())
                await self._quiet_and_check(index, [s.describe() for s in steps])
                self._write_progress(time.monotonic() - began)
            self.log("final: waiting for lost nodes' pods to go, then settling")
            await self._wait_lost_pods_gone()
            await self._quiet_and_check(self.options.rounds + 1, ["(final convergence)"])
        finally:
            if poller is not None:
                poller.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poller
            for worker in self.workers:
                worker.stop(20)
            if partitions is not None:
                partitions.cleanup()
            if recorder is not None:
                recorder.stop()
            stack.stop()
        return self._results(time.monotonic() - began)

    def _wait_service_account(self) -> None:
        deadline = time.monotonic() + 60
        while self.kube.get(Resource("", "v1", "serviceaccounts", "ServiceAccount"), self.namespace,
                            "default") is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"namespace {self.namespace} got no default ServiceAccount")
            time.sleep(0.1)

    # --- workload ----------------------------------------------------------------------------------------------------
    async def _create_workload(self) -> None:
        for pcs in self.workload.pcses:
            created = self.kube.create(PODCLIQUESETS, self.namespace, pcs.manifest(self.namespace,
                                                                                    self.workload.replicas))
            self.workload.uids[pcs.name] = created["metadata"]["uid"]
        self.log(f"created {len(self.workload.pcses)} PodCliqueSets x {self.workload.replicas} replicas; "
                 "waiting for every replica to settle")

        def expected(key: ReplicaKey, status: ReplicaStatus) -> bool:
            pcs = self.workload.by_name(key[0])
            return status.phase is (Phase.AVAILABLE if pcs.schedulable else Phase.SCHEDULING)

        await self._wait(lambda: self._all_statuses(expected), 240, "every replica Available (gated: Scheduling)")
        for key in self.keys:
            if self.workload.by_name(key[0]).paused:
                result = await self.client.get_workflow_handle(self.workflow_id(key)).execute_update(
                    PAUSE, PauseRequest(reason="fault run: breaches are held"), result_type=ControlResult)
                assert result.accepted, result
        node = PROTECTED_NODE
        core = CoreV1Api(self.kube.api_client)
        for kind, body in foreign_objects(node):
            # Created under a field manager of their own: a write by the product would show up as its manager.
            if kind == "Pod":
                core.create_namespaced_pod(self.namespace, cast(Any, body), field_manager=RUNNER_FIELD_MANAGER)
            else:
                core.create_namespaced_config_map(self.namespace, cast(Any, body), field_manager=RUNNER_FIELD_MANAGER)

        def foreign_ready() -> bool:
            pods = [p for p in self.kube.list_items(PODS, self.namespace)
                    if p["metadata"]["name"].startswith(FOREIGN_MARK) and not p["spec"].get("schedulingGates")]
            return all(any(c.get("type") == "Ready" and c.get("status") == "True"
                           for c in (p.get("status") or {}).get("conditions") or []) for p in pods)

        await self._wait(foreign_ready, 60, "foreign pods Ready")
        await asyncio.sleep(2)
        self.foreign_before = {k: v for k, v in self._foreign_now().items() if v is not None}
        self.log(f"planted {len(self.foreign_before)} foreign objects (look-alikes included) on {node}")

    @property
    def keys(self) -> list[ReplicaKey]:
        return sorted(self.workload.plans)

    def workflow_id(self, key: ReplicaKey) -> str:
        return replica_workflow_id(self.namespace, key[0], self.workload.uids[key[0]], key[1])

    def _pods_of(self, pcs: str) -> list[str]:
        return sorted(pod for (name, _), plan in self.workload.plans.items() if name == pcs
                      for pclq in plan.pod_cliques for pod in pclq.pod_names)

    def _scalable(self) -> tuple[tuple[str, str, int], ...]:
        """What an HPA may scale (issue 13): the PCSGs and standalone PodCliques of schedulable, unpaused PCSes."""
        found: list[tuple[str, str, int]] = []
        for (name, _), plan in sorted(self.workload.plans.items()):
            pcs = self.workload.by_name(name)
            if not pcs.schedulable or pcs.paused:
                continue
            found += [("PodCliqueScalingGroup", g.name, g.replicas) for g in plan.scaling_groups]
            found += [("PodClique", p.name, p.replicas) for p in plan.standalone()]
        return tuple(found)

    def _changeable(self) -> tuple[str, ...]:
        """Whose template a user may change (issue 12): schedulable, unpaused PCSes with termination on. A rollout
        waits for every recreated pod to be Ready; in `nodelay` and `paused` a pod the runner broke stays broken
        (no termination recreates it), so their rollouts would wait for a heal the schedule may never draw."""
        return tuple(p.name for p in self.workload.pcses if p.schedulable and not p.paused and p.delay)

    @property
    def changed(self) -> list[str]:
        """PCSes whose template the run has changed so far (their rollouts must complete in every quiet period)."""
        return sorted({str(c["pcs"]) for c in self.injector.template_changes})

    def _breakable_pods(self) -> dict[str, list[str]]:
        return {p.name: self._pods_of(p.name) for p in self.workload.pcses if p.breakable}

    @property
    def in_scope(self) -> set[ReplicaKey]:
        """Replicas whose breaches must end in a termination: termination on and not paused."""
        return {k for k in self.keys if self.workload.by_name(k[0]).delay and not self.workload.by_name(k[0]).paused}

    @property
    def paused(self) -> set[ReplicaKey]:
        return {k for k in self.keys if self.workload.by_name(k[0]).paused}

    # --- Temporal ----------------------------------------------------------------------------------------------------
    async def _status(self, key: ReplicaKey) -> ReplicaStatus | None:
        try:
            status: ReplicaStatus = await self.client.get_workflow_handle(self.workflow_id(key)).query(
                STATUS_QUERY, result_type=ReplicaStatus, rpc_timeout=timedelta(seconds=5))
        except (TimeoutError, RPCError, WorkflowQueryFailedError, RuntimeError):
            return None
        self.statuses[key] = status
        return status

    async def _all_statuses(self, predicate: Callable[[ReplicaKey, ReplicaStatus], bool]) -> bool:
        for key in self.keys:
            status = await self._status(key)
            if status is None or not predicate(key, status):
                return False
        return True

    async def _poll_statuses(self) -> None:
        """Samples every replica's phase (what phases the faults met) while the run goes on."""
        while True:
            for key in self.keys:
                status = await self._status(key)
                if status is not None:
                    self.phases_seen[status.phase.value + (" (paused)" if status.paused else "")] += 1
            await asyncio.sleep(2)

    async def _deadline_pending(self, pod: str) -> bool:
        key = next(k for k, plan in self.workload.plans.items()
                   if any(pod in pclq.pod_names for pclq in plan.pod_cliques))
        status = await self._status(key)
        return bool(status and status.deadlines)

    async def _digests(self) -> dict[ReplicaKey, WorkflowDigest]:
        return {key: await self.histories.workflow(self.workflow_id(key)) for key in self.keys}

    # --- quiet period and checks -------------------------------------------------------------------------------------
    def _live(self) -> LiveObjects:
        ns = self.namespace
        return LiveObjects(
            pclqs=self.kube.list_items(PODCLIQUES, ns), pcsgs=self.kube.list_items(SCALINGGROUPS, ns),
            gangs=self.kube.list_items(PODGANGS, ns), pods=self.kube.list_items(PODS, ns),
            services=self.kube.list_items(SERVICES, ns), pcses=self.kube.list_items(PODCLIQUESETS, ns),
            nodes={n["metadata"]["name"] for n in self.kube.list_items(NODES)},
        )

    async def _unsettled(self) -> list[str]:
        """Why the round has not converged yet; empty once it has."""
        try:
            live = await asyncio.to_thread(self._live)
        except KubeError as exc:
            return [f"kube-apiserver: {exc}"]
        plans, uids = self.workload.plans, self.workload.uids
        problems = invariants.unsettled_objects(live, plans, uids)
        incomplete = {p["metadata"]["name"]: rollout_invariants.rollout_incomplete([p], live.pods)
                      for p in live.pcses if p["metadata"]["name"] in self.changed}
        await self._heal_masked(live, rolling={name for name, why in incomplete.items() if why})
        problems += [why for whys in incomplete.values() for why in whys]
        events = list(self.recorder.snapshot()[0])
        breaches = invariants.live_breaches(live, plans, uids, self.in_scope, events)
        for key in self.keys:
            status = await self._status(key)
            if status is None:
                problems.append(f"{key}: workflow does not answer")
                continue
            if status.phase in BUSY_PHASES:
                problems.append(f"{key}: phase {status.phase.value}")
            known = {c.name: c for c in status.cliques}
            for breach in (b for b in breaches if b.key == key):
                seen = known.get(breach.pclq)
                if seen is None or seen.was_available:
                    problems.append(f"{key}: {breach.pclq} has {breach.ready}/{breach.min_available} Ready")
        if problems:
            return problems
        digests = await self._digests()
        return [f"{c.key}: terminate_gang in flight" for d in digests.values() for c in d.terminations
                if not c.completed]

    async def _heal_masked(self, live: LiveObjects, rolling: set[str]) -> None:
        """Faults stop in the quiet period: a pod the runner broke in a PodClique the rolling update masks
        (UpdateInProgress), or in one it recreated and still waits on (NeverAvailable; `rolling`: the changed PCSes
        whose rollout is incomplete), would hold the rollout's turn for ever, so heal it (counted). A breach that is
        neither is left alone: it must end in a termination."""
        masked = {p["metadata"]["uid"] for p in live.pclqs
                  if rollout_invariants.masked(p) or rollout_invariants.held_by_rollout(p, rolling)}
        for pod in live.pods:
            name = pod["metadata"]["name"]
            owner = next((r.get("uid") for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")),
                         None)
            outage_broke = self.injector.outage_broken.get(name) == pod["metadata"]["uid"]
            if (name in self.planner.broken or outage_broke) and owner in masked:
                self.planner.broken.discard(name)
                self.injector.outage_broken.pop(name, None)
                await asyncio.to_thread(self.injector.set_readiness, name, False)
                self.injector.readiness["heal (masked by a rollout, quiet period)"] += 1
                self.log(f"    healed {name}: broken in a PodClique a rollout masks or waits on")

    async def _quiet_and_check(self, index: int, steps: list[str]) -> None:
        began = time.monotonic()
        problems: list[str] = ["not looked yet"]
        while True:
            while time.monotonic() - began < self.options.settle_timeout:
                await self._revive_components(self.stack, index)
                problems = await self._unsettled()
                if not problems:
                    break
                await asyncio.sleep(1.0)
            # Histories first, then the objects: whatever the workflow saw happened before what the check looks at.
            histories_read_at = time.time()
            digests = await self._digests()
            live = await asyncio.to_thread(self._live)
            late = invariants.unsettled_objects(live, self.workload.plans, self.workload.uids)
            # A rollout's status moves too: a replica gang-terminated in the round shows updated again only once the
            # rollout workflow has read it back Ready, which may come after the objects settled (smoke, seed 7,
            # round 3: updatedReplicas 1 -> 0 -> 1 around the check).
            late += [why for p in live.pcses if p["metadata"]["name"] in self.changed
                     for why in rollout_invariants.rollout_incomplete([p], live.pods)]
            if problems or not late or time.monotonic() - began >= self.options.settle_timeout:
                break
            # Something moved after the round had settled (a lost node's pods garbage-collected ~60 s after the
            # node went): settle again rather than judge a moment of convergence.
            self.log(f"  changed after settling ({late[0]}{' …' if len(late) > 1 else ''}); settling again")
        settle = time.monotonic() - began
        settled = not problems
        found = await self._check(index, live, digests, settled, histories_read_at)
        new = 0
        for violation in found.violations:
            if violation.key not in self.violations:
                self.violations[violation.key] = (index, violation)
                new += 1
                self.log(f"  VIOLATION [{violation.invariant}] {violation.detail}")
        if not settled:
            key = f"unsettled/{index}"
            detail = f"round {index}: not converged after {settle:.0f}s: {'; '.join(problems[:8])}"
            self.violations[key] = (index, Violation(invariants.NONE_MISSING if any("Ready" in p for p in problems)
                                                     else invariants.OBJECTS, key, detail))
            self.log(f"  VIOLATION {detail}")
            new += 1
            for line in await diagnose.open_workflow_lines(self.client, self.task_queue,
                                                           self.run_dir / "histories" / f"round-{index}"):
                self.log(f"    {line}")
            for line in diagnose.unready_pod_lines(live.pods):
                self.log(f"    {line}")
            rundirs.keep(self.run_dir)
            self.log(f"    the stack's logs are kept in {self.run_dir}/logs")
        self.rounds.append(RoundReport(index, steps, round(settle, 1), settled, problems[:20] if not settled else [],
                                       new))
        self.log(f"  settled in {settle:.1f}s; terminations checked so far {found.counts['terminations_checked']}, "
                 f"violations {len(self.violations)}")

    async def _check(self, index: int, live: LiveObjects, digests: dict[ReplicaKey, WorkflowDigest],
                     settled: bool, histories_read_at: float) -> Findings:
        plans, uids = self.workload.plans, self.workload.uids
        pod_events, pclqs = self.recorder.snapshot()
        events = await asyncio.to_thread(self.kube.list_items, EVENTS, self.namespace)
        totals = {k: s.terminations_total for k, s in self.statuses.items()}
        delays = {(key, pclq.name): self.workload.delay_of(key[0], pclq.name) or timedelta(0)
                  for key, plan in plans.items() for pclq in plan.pod_cliques}
        breaches = invariants.live_breaches(live, plans, uids, self.in_scope, pod_events)
        masked = {p["metadata"]["uid"] for p in live.pclqs if rollout_invariants.masked(p)}
        found = Findings()
        found.counts["breaches_masked_by_rollout"] += sum(1 for b in breaches if b.uid in masked)
        breaches = [b for b in breaches if b.uid not in masked]
        _, rollout_cliques = rollout_invariants.rollout_deleted(digests)
        found.merge(invariants.never_early(digests, pclqs))
        found.merge(invariants.decided_fresh(digests))
        planned = {pclq.name for plan in plans.values() for pclq in plan.pod_cliques}
        found.merge(invariants.exactly_once(digests, totals, events, uids, pclqs, self.paused, settled, planned,
                                            set(rollout_cliques), histories_read_at))
        found.merge(rollout_invariants.rollout_budget_and_once(pod_events, digests))
        if settled:
            changed = [p for p in live.pcses if p["metadata"]["name"] in self.changed]
            found.merge(rollout_invariants.rollout_complete(changed, live.pods, index))
        found.merge(invariants.scaled_gates(pod_events, plans))
        found.merge(invariants.objects_match(live, plans, uids, index))
        found.merge(invariants.none_missing(breaches, digests, delays, time.time(), self.options.missing_grace))
        found.merge(invariants.foreign_untouched(self.foreign_before, await asyncio.to_thread(self._foreign_now)))
        found.merge(await self._replay_histories())
        for name, value in found.counts.items():
            if name in CUMULATIVE or name.startswith("terminations_"):
                self.last[name] = value
            else:
                self.summed[name] += value
        self.lateness = found.lateness
        return found

    async def _replay_histories(self) -> Findings:
        pending, self.histories.to_replay = self.histories.to_replay, {}
        return await invariants.replayable(self.replayer, pending, keep_in=self.options.out_dir)

    def _foreign_now(self) -> dict[str, JSON | None]:
        now: dict[str, JSON | None] = {}
        for kind, body in foreign_objects(PROTECTED_NODE):
            resource = PODS if kind == "Pod" else CONFIGMAPS
            now[f"{kind}/{body['metadata']['name']}"] = self.kube.get(resource, self.namespace,
                                                                      body["metadata"]["name"])
        return now

    def _partitions(self) -> Partitions | None:
        """This run's worker cgroups, when a partition kind is on; refused up front where none can be made."""
        if not set(schedule.PARTITIONS) & set(self.options.settings.fault_kinds):
            return None
        try:
            partitions = Partitions()
        except RuntimeError as err:
            raise PartitionsUnavailable(str(err)) from err
        reason = partitions.unavailable()
        if reason is not None:
            partitions.cleanup()
            raise PartitionsUnavailable(reason)
        for rule in partitions.sweep_stale():
            self.log(f"removed a drop rule a fault run that died left behind: {rule}")
        return partitions

    async def _revive_components(self, stack: LocalStack, index: int) -> None:
        """A stack component that exited although no fault stopped it (seen: kube-scheduler exiting with status 1,
        nothing logged, after repeated kube-apiserver outages) is the test bed failing, not the product: note it
        and start it again, so the round is judged on the product alone."""
        for name, component in stack.components.items():
            popen = component.process.popen
            if popen is None or popen.poll() is None:
                continue
            self.component_exits.append({"round": index, "component": name, "exit_code": popen.returncode})
            self.log(f"  stack component {name} exited on its own (status {popen.returncode}); starting it again")
            await asyncio.to_thread(stack.start_component, name)
        for worker in self.workers:
            popen = worker.popen
            if popen is None or popen.poll() is None:
                continue
            # a crash of the product itself
            key = f"worker-exit/{index}/{worker.name}/{popen.returncode}"
            detail = f"round {index}: worker process {worker.name} exited on its own (status {popen.returncode})"
            self.violations.setdefault(key, (index, Violation("worker", key, detail)))
            self.log(f"  VIOLATION {detail}; starting it again")
            await asyncio.to_thread(worker.start)

    async def _wait_lost_pods_gone(self) -> None:
        lost = set(self.injector.lost_nodes)

        def gone() -> bool:
            pods = self.kube.list_items(PODS, self.namespace)
            return not any(p["spec"].get("nodeName") in lost for p in pods)

        await self._wait(gone, 150, "pods of lost nodes gone")

    async def _wait(self, predicate: Callable[[], Any], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if asyncio.iscoroutine(value):
                value = await value
            if value:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")
            await asyncio.sleep(0.5)

    # --- results -----------------------------------------------------------------------------------------------------
    def _write_progress(self, seconds: float) -> None:
        """The results so far, after every round: a 100-round run takes two hours, and one cut short (the machine's
        session ended, the stack failed) still leaves its figures. The final file supersedes it."""
        path = progress_path(self.options)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".tmp")
            partial.write_text(json.dumps(self._results(seconds), indent=1, default=str) + "\n")
            partial.replace(path)
        except OSError as err:  # the run goes on; only the progress file is missing
            self.log(f"  could not write {path}: {err}")

    def _results(self, seconds: float) -> dict[str, Any]:
        by_invariant = Counter(v.invariant for _, v in self.violations.values())
        settles = [r.settle_seconds for r in self.rounds]
        late = sorted(d.seconds for d in self.lateness)
        counts = {**self.summed, **self.last}
        return {
            "command": " ".join(["grove-temporal", *sys.argv[1:]]) if sys.argv else "",
            "seed": self.options.seed,
            "rounds": self.options.rounds,
            "rounds_done": sum(1 for r in self.rounds if r.index <= self.options.rounds),
            "replicas": self.options.replicas,
            "settings": asdict(self.options.settings),
            "settle_timeout_seconds": self.options.settle_timeout,
            "commit": _git_commit(),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                        "load_at_end": os.getloadavg()[0]},
            "finished_at": datetime.now(UTC).isoformat(),
            "duration_seconds": round(seconds, 1),
            "run_dir": str(self.run_dir),
            "faults": dict(sorted(self.injector.faults.items())),
            "faults_total": sum(self.injector.faults.values()),
            "workers": self.options.settings.workers,
            "worker_clock_skew_seconds": self.options.settings.worker_clock_skew_seconds,
            "workflow_sandbox": _workflow_sandbox(),
            "worker_kills": dict(sorted(self.injector.worker_kills.items())),
            "readiness_changes": dict(self.injector.readiness),
            "hpa_scale_writes": dict(sorted(self.injector.scales.items())),
            "template_changes": self.injector.template_changes,
            "apiserver_outages": self.injector.outages,
            "lost_nodes": self.injector.lost_nodes,
            "partitions": self.injector.partitioned,
            "stack_component_exits": self.component_exits,
            "terminations_checked": counts.get("terminations_checked", 0),
            "counts": dict(sorted(counts.items())),
            "deletion_after_deadline_ms": {
                "n": len(late),
                "min": round(late[0] * 1000) if late else None,
                "median": round(statistics.median(late) * 1000) if late else None,
                "max": round(late[-1] * 1000) if late else None,
            },
            "slowest_deletions": self._slowest_deletions(),
            "settle_seconds": {"median": statistics.median(settles) if settles else None,
                               "max": max(settles) if settles else None},
            "phases_sampled": dict(sorted(self.phases_seen.items())),
            "recorder_relists": self.recorder.relists,
            "violations": len(self.violations),
            "violations_by_invariant": {k: by_invariant.get(k, 0) for k in (*invariants.INVARIANTS,
                                                                            *rollout_invariants.ROLLOUT_INVARIANTS,
                                                                            "worker")},
            "violation_details": [{"round": r, **asdict(v)} for r, v in self.violations.values()],
            "round_reports": [asdict(r) for r in self.rounds],
        }

    def _slowest_deletions(self, count: int = 10, before: float = 60.0) -> list[dict[str, Any]]:
        """The slowest gang-termination deletions, each with every step the injector began from `before` seconds
        ahead of its deadline until our watch saw it (offsets from the deadline): what a slow one ran into."""
        timeline = self.injector.timeline
        slowest = sorted(self.lateness, key=lambda d: d.seconds, reverse=True)[:count]
        return [{"after_deadline_ms": round(d.seconds * 1000), "replica": d.replica, "pod_clique": d.pod_clique,
                 "uid": d.uid, "scope": d.scope,
                 "deadline": datetime.fromtimestamp(d.deadline, UTC).isoformat(),
                 "steps_around": [f"{at - d.deadline:+.1f}s {what}" for at, what in timeline
                                  if d.deadline - before <= at <= d.seen]}
                for d in slowest]


def _workflow_sandbox() -> bool:
    """Whether the workers ran workflows in Temporal's sandbox (they inherit GROVE_TEMPORAL_WORKFLOW_SANDBOX)."""
    from worker.config import WorkerSettings

    return WorkerSettings().workflow_sandbox


def _git_commit() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def progress_path(options: Options) -> Path:
    """Where a run in progress keeps its results so far (one per seed and length: a rerun overwrites it)."""
    return options.out_dir / f"faults-seed{options.seed}-r{options.rounds}-progress.json"


def write_results(results: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"faults-seed{results['seed']}-r{results['rounds']}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    return path


def render(results: dict[str, Any]) -> str:
    lines = [
        f"fault run: seed {results['seed']}, {results['rounds']} rounds, {results['replicas']} replicas per PCS, "
        f"{results.get('workers', 1)} worker(s)"
        + (f" (the last one's clock {results['worker_clock_skew_seconds']:+g}s off)"
           if results.get("worker_clock_skew_seconds") else "")
        + (", workflow sandbox off" if results.get("workflow_sandbox") is False else "")
        + f", {results['duration_seconds']:.0f}s",
        "worker kills: " + (", ".join(f"{k} {v}" for k, v in results.get("worker_kills", {}).items()) or "none"),
        "faults injected: " + ", ".join(f"{k} {v}" for k, v in results["faults"].items())
        + f" (total {results['faults_total']})",
        "readiness changes: " + ", ".join(f"{k} {v}" for k, v in results["readiness_changes"].items()),
        "HPA-style scale writes: " + (", ".join(f"{k} {v}" for k, v in results["hpa_scale_writes"].items())
                                      or "none"),
        "template changes (rolling updates): " + (", ".join(f"{c['pcs']} {c['change']}"
                                                              for c in results.get("template_changes", []))
                                                    or "none"),
        "partitions (packets dropped): " + (", ".join(f"{p['worker']} from {p['from']} {p['seconds']}s"
                                                      for p in results.get("partitions", [])) or "none"),
        f"apiserver outages with a deadline pending: "
        f"{sum(1 for o in results['apiserver_outages'] if o['deadline_pending'])}/{len(results['apiserver_outages'])}",
        f"terminations checked: {results['terminations_checked']} "
        + "(" + ", ".join(f"{k.removeprefix('terminations_')} {v}" for k, v in results["counts"].items()
                          if k.startswith("terminations_") and k != "terminations_checked") + ")",
        "other checks: " + ", ".join(f"{k} {v}" for k, v in results["counts"].items()
                                     if not k.startswith("terminations_")),
        f"deletions seen after their deadline: {results['deletion_after_deadline_ms']} ms",
        *(f"  slowest: {d['after_deadline_ms']} ms, {d['scope']} termination of {d['replica']} "
          f"({d['pod_clique']}); steps around it: {'; '.join(d['steps_around']) or 'none'}"
          for d in results.get("slowest_deletions", [])[:1]),
        f"settle time per round: median {results['settle_seconds']['median']}s, max {results['settle_seconds']['max']}s",
        "phases sampled: " + ", ".join(f"{k} {v}" for k, v in results["phases_sampled"].items()),
        "stack components that exited on their own (restarted; not the product): "
        + (", ".join(f"{e['component']} (round {e['round']}, status {e['exit_code']})"
                     for e in results["stack_component_exits"]) or "none"),
        f"invariant violations: {results['violations']} "
        + "(" + ", ".join(f"{k} {v}" for k, v in results["violations_by_invariant"].items()) + ")",
    ]
    lines += [f"  round {v['round']} [{v['invariant']}] {v['detail']}" for v in results["violation_details"]]
    return "\n".join(lines)


def run(options: Options) -> dict[str, Any]:
    return asyncio.run(FaultRun(options).run())

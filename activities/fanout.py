"""Independent Kubernetes requests of one activity, issued concurrently.

An activity's requests that do not depend on each other (the four reads of an observation, the status writes of
several objects, the gate patches of several pods) used to go one after the other; on a loaded apiserver each
waits ~5-20 ms, and the replica's next step waits for all of them. They now share a small pool. Bulk work
(materialising a replica's pods) has a pool of its own: with one pool, 100 new 17-pod replicas queued 1,600 pod
creates, and the gate releases, status writes and reads of replicas already created waited behind them for up to
8 s (B3, one run in three: local activities that outlasted their workflow task, 10 more requests and events per
replica). The pools are per process, so the number of connections stays bounded (activity threads + both pools;
worker.app sizes the urllib3 pool for that). The calling thread runs the first call itself: an activity never
waits on a queue alone.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

FANOUT_THREADS = 8  # per pool
_pool = ThreadPoolExecutor(max_workers=FANOUT_THREADS, thread_name_prefix="kube-fanout")
_bulk_pool = ThreadPoolExecutor(max_workers=FANOUT_THREADS, thread_name_prefix="kube-fanout-bulk")
FANOUT_POOLS = 2


def fan_out(calls: Sequence[Callable[[], T]], *, bulk: bool = False) -> list[T]:
    """Results of `calls` in their order. Every call finishes before this returns; if any raised, the first
    failure in call order is raised (as the sequential loop it replaces would have). `bulk`: many calls that may
    wait (creating a replica's pods), on their own pool, so they never hold up the short fan-outs."""
    if len(calls) <= 1:
        return [call() for call in calls]
    pool = _bulk_pool if bulk else _pool
    # Each call runs in a copy of this context: the activity attempt's request deadline goes with it (kubeapi).
    futures: list[Future[T]] = [pool.submit(contextvars.copy_context().run, call) for call in calls[1:]]
    results: list[T] = []
    failure: BaseException | None = None
    try:
        results.append(calls[0]())
    except BaseException as exc:  # noqa: BLE001 - re-raised below, once the others have finished
        failure = exc
    for future in futures:
        error = future.exception()
        if error is None:
            results.append(future.result())
        elif failure is None:
            failure = error
    if failure is not None:
        raise failure
    return results


async def gather_all(awaitables: Iterable[Awaitable[Any]]) -> None:
    """`fan_out`'s contract for coroutines: every one finishes before this returns, and the first failure in their
    order is raised then. Plain `asyncio.gather` raises at the first failure and leaves the others running past the
    activity that started them (the reconciler's judging, starting workflows and waking surplus ones)."""
    outcomes = await asyncio.gather(*awaitables, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome

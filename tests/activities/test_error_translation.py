"""How a Kubernetes failure reaches Temporal's retry rules, and what the worker's log says of an outage."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.testing import ActivityEnvironment

from activities.kubeapi import PODS, RETRIES, Kube, KubeError
from activities.reachability import RETRY_WHEN_BACK, Reachability
from activities.replica import FORBIDDEN, REJECTED, UNREACHABLE, translating_errors
from worker.logs import configure_logging


def _failing(exc: KubeError) -> ApplicationError | KubeError:
    @translating_errors("read replica")
    def activity_body() -> None:
        raise exc

    with pytest.raises((ApplicationError, KubeError)) as raised:
        activity_body()
    assert isinstance(raised.value, ApplicationError | KubeError)
    return raised.value


def test_an_unreachable_apiserver_is_a_benign_retried_failure_with_one_log_line(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="activities.replica"):
        err = _failing(KubeError(0, "MaxRetryError: HTTPSConnectionPool(host='127.0.0.1'): connection refused"))
    assert isinstance(err, ApplicationError)
    assert err.type == UNREACHABLE and not err.non_retryable
    assert err.category == ApplicationErrorCategory.BENIGN  # the SDK logs it at DEBUG, not WARNING with tracebacks
    assert err.__cause__ is None and err.__suppress_context__
    assert "read replica: kube-apiserver unreachable" in err.message
    lines = [r.getMessage() for r in caplog.records if r.name == "activities.replica"]
    assert len(lines) == 1 and "kube-apiserver unreachable" in lines[0] and "connection refused" in lines[0]


@pytest.mark.parametrize(("status", "kind"), [(422, REJECTED), (400, REJECTED), (403, FORBIDDEN)])
def test_a_request_that_cannot_succeed_is_not_retried(status: int, kind: str) -> None:
    err = _failing(KubeError(status, "nope"))
    assert isinstance(err, ApplicationError) and err.type == kind and err.non_retryable


@pytest.mark.parametrize("status", [409, 500, 503])
def test_conflicts_and_server_errors_stay_retried_as_they_are(status: int) -> None:
    err = _failing(KubeError(status, "busy"))
    assert isinstance(err, KubeError) and err.status == status


def test_the_worker_log_drops_urllib3s_per_retry_lines_and_keeps_its_other_warnings() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging("INFO")
    finally:
        root.handlers[:], root.level = handlers, level  # the filter stays on its logger; pytest's capture comes back
    pool = logging.getLogger("urllib3.connectionpool")
    retry = pool.makeRecord(pool.name, logging.WARNING, __file__, 1,
                            "Retrying (%r) after connection broken by '%r': %s", ("Retry(total=2)", "err", "/x"), None)
    full = pool.makeRecord(pool.name, logging.WARNING, __file__, 1, "Connection pool is full, discarding connection: %s",
                           ("127.0.0.1",), None)
    assert not pool.filter(retry)
    assert pool.filter(full)


def _in_activity(body: Callable[[], object], *, local: bool, attempt: int = 1,
                 seconds: float | None = None) -> ApplicationError:
    """What `body` raises as an activity that translates errors, run in an activity context: an attempt of `seconds`
    (by default what the replica workflow gives: 10 s to a local activity, 60 s to an activity)."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, is_local=local, attempt=attempt, started_time=datetime.now(UTC),
                                   start_to_close_timeout=timedelta(seconds=seconds or (10 if local else 60)))
    with pytest.raises(ApplicationError) as raised:
        env.run(translating_errors("read replica")(body))
    return raised.value


def _refused(reachability: Reachability) -> Callable[[], None]:
    def body() -> None:
        raise KubeError(0, "connection refused", reachability=reachability)

    return body


def test_an_attempt_that_met_an_outage_asks_for_the_next_at_once_when_kube_apiserver_answers_again() -> None:
    back_at = time.monotonic() + 0.6
    answers = Reachability(lambda timeout: time.monotonic() >= back_at)
    began = time.monotonic()
    err = _in_activity(_refused(answers), local=False)
    assert err.type == UNREACHABLE and err.next_retry_delay == RETRY_WHEN_BACK
    assert time.monotonic() - began < 2.0, "returned once it answered, not at the end of the attempt's time"


@pytest.mark.parametrize(("attempt", "delay"), [(1, 3), (2, 6), (9, 10)])
def test_a_local_activity_waits_two_seconds_at_most_and_backs_off_on_a_timer_from_3_to_10_s(
        attempt: int, delay: int) -> None:
    down = Reachability(lambda timeout: False)
    began = time.monotonic()
    err = _in_activity(_refused(down), local=True, attempt=attempt)
    assert 2.0 <= time.monotonic() - began < 3.0
    assert err.next_retry_delay == timedelta(seconds=delay)


def _serving(answer: Callable[[socket.socket], None], timeout: float | tuple[float, float] = (1.0, 1.0),
             ) -> tuple[Kube, Callable[[], None]]:
    """A Kube against a listener whose every connection is handed to `answer` (in a thread). By default a 1 s connect
    and 1 s silence timeout: the default's shape (activities/kubeapi.py: CONNECT_SECONDS, SILENCE_SECONDS), shortened."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        with contextlib.suppress(OSError):  # the listener closed at the end of the test
            while True:
                conn = listener.accept()[0]
                accepted.append(conn)
                threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    configuration = client.Configuration(host=f"http://127.0.0.1:{listener.getsockname()[1]}")
    configuration.retries = RETRIES

    def close() -> None:
        listener.close()
        for conn in accepted:
            conn.close()
    return Kube(client.ApiClient(configuration), timeout=timeout), close


def test_a_request_that_hangs_fails_as_unreachable_within_the_attempt_not_at_the_clients_timeout() -> None:
    """A network partition drops packets: the connection opens (here: a listener that never answers) and the request
    waits. Inside an activity the request ends before the attempt does, as unreachable, so the attempt can still
    wait for kube-apiserver and name its next attempt; before, it hung for the client's 30 s."""
    kube, close = _serving(lambda conn: None, timeout=30.0)  # accepts, never answers
    began = time.monotonic()
    try:
        err = _in_activity(lambda: kube.get(PODS, "ns", "p"), local=True, seconds=4)
    finally:
        close()
    assert err.type == UNREACHABLE and "timed out" in err.message.lower(), err.message
    assert time.monotonic() - began < 4.0, "ended within the attempt's 4 s"


def test_a_request_is_cut_off_by_silence_not_by_a_long_answer_that_keeps_coming() -> None:
    """The default timeout bounds silence per read, not the whole request: an answer that keeps streaming for longer
    (a large LIST) completes, a request that hears nothing fails as unreachable after the silence bound."""
    def streaming(conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            parts = [b'{"items": [', *([b'{"a": 1},'] * 5), b'{"a": 1}]}']
            for part in parts:
                conn.sendall(b"%x\r\n%s\r\n" % (len(part), part))
                time.sleep(0.4)  # 2.8 s in all, never 1 s silent
            conn.sendall(b"0\r\n\r\n")

    kube, close = _serving(streaming)
    try:
        began = time.monotonic()
        assert len(kube.list_items(PODS, "ns")) == 6
        assert time.monotonic() - began > 2.0
    finally:
        close()

    kube, close = _serving(lambda conn: conn.recv(65536))  # reads the request, never answers
    try:
        began = time.monotonic()
        with pytest.raises(KubeError) as raised:
            kube.get(PODS, "ns", "p")
        assert raised.value.status == 0 and raised.value.reachability is kube.reachability
        assert time.monotonic() - began < 2.0
    finally:
        close()


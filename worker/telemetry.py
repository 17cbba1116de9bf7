"""Tracing and SDK metrics, configured the standard way.

Tracing: Temporal's TracingInterceptor on the client (so workers built from it, and workflows the reconciler starts
from an activity, carry the trace), with the exporter chosen by the standard OpenTelemetry variables:
OTEL_TRACES_EXPORTER (none | console | otlp, comma-separated; default none), OTEL_EXPORTER_OTLP_* for otlp
(HTTP/protobuf), OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES for the resource.

Metrics: the Temporal SDK (Rust core) serves Prometheus text on a loopback port of its own; worker/http.py appends
it to our /metrics, so one scrape target carries both.
"""

from __future__ import annotations

import os
import socket
import urllib.request
from dataclasses import dataclass

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from temporalio import client
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from worker.heartbeats import KeepAliveInterceptor
from workflows.nudge_versions import NudgeVersionsInterceptor

DEFAULT_SERVICE_NAME = "grove-temporal"
EXPORTERS = ("none", "console", "otlp")


class TelemetryConfigError(ValueError):
    pass


def _exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    if name == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        return OTLPSpanExporter()  # endpoint, headers, timeout from OTEL_EXPORTER_OTLP_*
    raise TelemetryConfigError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r}; use one of {', '.join(EXPORTERS)}")


def configure_tracing(environ: dict[str, str] | None = None) -> TracerProvider | None:
    """Install a tracer provider when OTEL_TRACES_EXPORTER asks for one; None when tracing is off."""
    env = os.environ if environ is None else environ
    names = [n.strip() for n in env.get("OTEL_TRACES_EXPORTER", "none").split(",") if n.strip()]
    names = [n for n in names if n != "none"]
    if not names:
        return None
    exporters = [_exporter(n) for n in names]  # validate every name before installing anything
    if not env.get("OTEL_SERVICE_NAME"):
        os.environ.setdefault("OTEL_SERVICE_NAME", DEFAULT_SERVICE_NAME)
    provider = TracerProvider(resource=Resource.create())
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return provider


def client_interceptors() -> list[client.Interceptor]:
    """Tracing (always on: with no tracer provider installed, OpenTelemetry's no-op tracer makes it free), the
    nudge versions header and activity heartbeats. All are worker interceptors too: a Worker built on this client
    applies them to its workflows and activities."""
    return [TracingInterceptor(), NudgeVersionsInterceptor(), KeepAliveInterceptor()]


@dataclass
class SdkMetrics:
    runtime: Runtime
    address: str

    def scrape(self, timeout: float = 2.0) -> bytes:
        try:
            with urllib.request.urlopen(f"http://{self.address}/metrics", timeout=timeout) as response:
                return bytes(response.read())
        except OSError:
            return b"# Temporal SDK metrics unavailable\n"


def sdk_metrics_runtime() -> SdkMetrics:
    """A Temporal runtime whose SDK metrics are served on a free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"127.0.0.1:{port}"
    # Prometheus conventions through the SDK's own options: durations in seconds with a `_seconds` unit suffix,
    # counters with `_total` (temporal_workflow_completed_total, temporal_activity_execution_latency_seconds).
    prometheus = PrometheusConfig(bind_address=address, counters_total_suffix=True, unit_suffix=True,
                                  durations_as_seconds=True)
    runtime = Runtime(telemetry=TelemetryConfig(metrics=prometheus))
    return SdkMetrics(runtime=runtime, address=address)

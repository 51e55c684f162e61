"""Tracing's pure logic: its settings from the OTEL_* variables, W3C propagation through Kafka
and HTTP headers, the bounded export queue's counted drops, and tracing off doing nothing."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading

import pytest
from prometheus_client import CollectorRegistry

from tickerwire.services.common import tracing
from tickerwire.services.common.kafka import send_traced
from tickerwire.services.common.runtime.errors import ConfigError
from tickerwire.services.common.runtime.logs import JsonFormatter
from tickerwire.services.common.tracing.export import ExportQueue, SpanCounters

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
#: An endpoint nothing listens on: the unit tests never reach it (nothing is exported in time).
ENDPOINT = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9/", "OTEL_BSP_SCHEDULE_DELAY": "60000"}


def config(**env: str) -> tracing.TracingConfig:
    return tracing.TracingConfig.from_env(env, "tickerwire-projector")


def test_off_by_default_and_every_default_is_the_specifications():
    c = config()
    assert not c.enabled
    assert (c.service_name, c.sampler, c.sampler_arg) == ("tickerwire-projector", "parentbased_always_on", 1.0)
    assert (c.max_queue_size, c.max_export_batch_size, c.schedule_delay_s, c.export_timeout_s) == (2048, 512, 1.0, 10.0)


def test_the_endpoint_turns_it_on_with_the_traces_path():
    assert config(OTEL_EXPORTER_OTLP_ENDPOINT="http://collector:4318/").endpoint == "http://collector:4318/v1/traces"
    assert config(OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://c:4318/x").endpoint == "http://c:4318/x"
    assert not config(OTEL_EXPORTER_OTLP_ENDPOINT="http://c:4318", OTEL_SDK_DISABLED="TRUE").enabled


def test_the_other_variables_are_read():
    c = config(
        OTEL_SERVICE_NAME="proj-eu",
        OTEL_TRACES_SAMPLER="parentbased_traceidratio",
        OTEL_TRACES_SAMPLER_ARG="0.25",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=prod, team=news%20desk",
        OTEL_BSP_MAX_QUEUE_SIZE="100",
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE="10",
        OTEL_BSP_SCHEDULE_DELAY="250",
        OTEL_EXPORTER_OTLP_TIMEOUT="1500",
    )
    assert (c.service_name, c.sampler, c.sampler_arg) == ("proj-eu", "parentbased_traceidratio", 0.25)
    assert c.resource_attributes == (("deployment.environment", "prod"), ("team", "news desk"))
    assert (c.max_queue_size, c.max_export_batch_size, c.schedule_delay_s, c.export_timeout_s) == (100, 10, 0.25, 1.5)
    assert config(OTEL_RESOURCE_ATTRIBUTES="service.name=from-attrs").service_name == "from-attrs"


@pytest.mark.parametrize(
    "env, names",
    [
        ({"OTEL_SDK_DISABLED": "yes"}, "OTEL_SDK_DISABLED"),
        ({"OTEL_TRACES_SAMPLER": "jaeger_remote"}, "OTEL_TRACES_SAMPLER"),
        ({"OTEL_TRACES_SAMPLER_ARG": "1.5"}, "OTEL_TRACES_SAMPLER_ARG"),
        ({"OTEL_TRACES_SAMPLER_ARG": "half"}, "OTEL_TRACES_SAMPLER_ARG"),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "0"}, "OTEL_BSP_MAX_QUEUE_SIZE"),
        ({"OTEL_BSP_SCHEDULE_DELAY": "1s"}, "OTEL_BSP_SCHEDULE_DELAY"),
        ({"OTEL_EXPORTER_OTLP_TIMEOUT": "-5"}, "OTEL_EXPORTER_OTLP_TIMEOUT"),
        ({"OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "20"}, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
        ({"OTEL_RESOURCE_ATTRIBUTES": "a=1,broken"}, "OTEL_RESOURCE_ATTRIBUTES"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:99999"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ],
)
def test_a_bad_value_fails_loudly_in_one_line_naming_its_variable(env, names):
    with pytest.raises(ConfigError) as caught:
        config(**env)
    assert names in str(caught.value) and "\n" not in str(caught.value)


def test_off_is_a_no_op_that_allocates_nothing():
    off = tracing.build(config())
    assert off is tracing.OFF and not off.enabled
    cm = off.start("send t", tracing.Kind.PRODUCER)
    assert cm is off.start("other")  # one shared context manager
    with cm as span:
        assert span is tracing.NO_SPAN and span.parent is None
    headers = [("traceparent", PARENT.encode())]
    off.inject(headers)
    assert headers == [("traceparent", PARENT.encode())]
    assert off.extract(headers) is None and off.current_ids() is None


@pytest.fixture
def on():
    handle = tracing.from_env(ENDPOINT, "tickerwire-test", CollectorRegistry())
    yield handle
    handle.shutdown(0.1)


def test_kafka_headers_round_trip_with_the_callers_context_as_parent(on):
    parent = on.extract([("other", b"x"), ("traceparent", PARENT.encode()), ("tracestate", b"vendor=1")])
    assert parent is not None
    headers = [("other", b"x"), ("traceparent", PARENT.encode())]
    with on.start("send t", tracing.Kind.PRODUCER, parent=parent):
        trace_id, span_id = on.current_ids() or ("", "")
        on.inject(headers)
    assert trace_id == TRACE_ID
    assert headers[0] == ("other", b"x")  # the caller's own headers are kept
    written = dict(headers)
    assert written["traceparent"] == f"00-{TRACE_ID}-{span_id}-01".encode()
    assert written["tracestate"] == b"vendor=1"
    assert [k for k, _ in headers].count("traceparent") == 1
    child = on.extract(headers)
    with on.start("process t", parent=child):
        assert (on.current_ids() or ("",))[0] == TRACE_ID


def test_http_headers_round_trip_and_root_starts_a_new_trace(on):
    headers: dict[str, str] = {}
    with on.start("a", parent=on.extract({"Traceparent": PARENT})):
        with on.start("b", parent=tracing.ROOT):
            assert (on.current_ids() or ("",))[0] != TRACE_ID
        span = on.span("c")  # not current, the current span's child
        on.inject(headers, span)
        span.end()
    assert headers["traceparent"].startswith(f"00-{TRACE_ID}-")
    assert on.extract({"traceparent": "00-zz-bad-01"}) is None
    assert on.extract({}) is None


def test_log_lines_inside_a_span_carry_its_ids(on):
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "hello", None, None)
    formatter = JsonFormatter("test")
    assert "trace_id" not in json.loads(formatter.format(record))
    with on.start("x", parent=on.extract({"traceparent": PARENT})):
        line = json.loads(formatter.format(record))
        trace_id, span_id = on.current_ids() or ("", "")
    assert (line["trace_id"], line["span_id"]) == (trace_id, span_id) == (TRACE_ID, span_id)
    assert len(span_id) == 16


def counted(registry: CollectorRegistry, reason: str | None = None) -> float:
    if reason is None:
        return registry.get_sample_value("tickerwire_trace_spans_exported_total") or 0.0
    return registry.get_sample_value("tickerwire_trace_spans_dropped_total", {"reason": reason}) or 0.0


def test_a_full_queue_drops_and_counts_without_waiting():
    registry = CollectorRegistry()
    release = threading.Event()
    sent: list[list] = []

    def send(batch) -> bool:
        sent.append(list(batch))
        release.wait(5)
        return True

    queue = ExportQueue(send, SpanCounters(registry), max_queue=3, max_batch=1, delay_s=0.01)
    queue.put("a")  # taken by the thread, whose send then blocks
    for _ in range(100):
        if sent:
            break
        threading.Event().wait(0.01)
    for span in "bcdef":
        queue.put(span)
    assert counted(registry, "queue_full") == 2.0  # b, c, d queued; e, f dropped
    release.set()
    assert queue.close(5)
    assert [s for batch in sent for s in batch] == ["a", "b", "c", "d"]
    assert counted(registry) == 4.0


def test_a_batch_the_exporter_fails_to_send_is_dropped_and_counted():
    registry = CollectorRegistry()
    queue = ExportQueue(lambda batch: False, SpanCounters(registry), max_queue=10, max_batch=2, delay_s=0.01)
    for span in "abc":
        queue.put(span)
    assert queue.close(5)
    assert (counted(registry, "export_failed"), counted(registry)) == (3.0, 0.0)


class CapturingProducer:
    """Records what ``send`` was given (the shape of aiokafka's producer, for send_traced)."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    async def send(self, topic, value=None, key=None, headers=None):
        self.sent.append({"topic": topic, "headers": headers})
        return None


async def test_send_traced_honours_the_callers_traceparent_and_keeps_its_headers(on):
    producer = CapturingProducer()
    given = [("source", b"cms"), ("traceparent", PARENT.encode())]
    await send_traced(producer, "tw.posts", b"{}", b"k", headers=given, tracing=on)
    await send_traced(producer, "tw.posts", b"{}", b"k", headers=given)  # tracing off: as given
    traced, plain = producer.sent
    written = dict(traced["headers"])
    assert written["source"] == b"cms"
    assert written["traceparent"].startswith(f"00-{TRACE_ID}-".encode())  # the caller's trace, a new span
    assert written["traceparent"] != PARENT.encode()
    assert plain["headers"] == given


def test_a_process_with_tracing_off_never_imports_the_sdk():
    """Installed but off runs what "not installed" runs: the four processes' modules and a handle
    built from an environment without an endpoint leave every opentelemetry module unimported."""
    probe = (
        "import sys\n"
        "import tickerwire.services.api.app, tickerwire.services.stream.app\n"
        "import tickerwire.services.projector.app, tickerwire.services.webhooks.app\n"
        "from tickerwire.services.common import tracing\n"
        "assert tracing.from_env({}, 'tickerwire-api') is tracing.OFF\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'opentelemetry'))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"

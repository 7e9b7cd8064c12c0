"""The Temporal SDK's own metrics beside Genesis's: with GENESIS_TEMPORAL_METRICS a process's
client (and so its workers) serves them for Prometheus, tagged with the machine's name; a bad
address or a taken port is a clear error."""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from datetime import timedelta

import pytest

pytest.importorskip("temporalio", reason="temporalio is not installed: pip install -e '.[test]'")

from helpers.procs import free_port  # noqa: E402
from temporalio import activity, workflow  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from genesis.config import ConfigError, Setting  # noqa: E402
from genesis.temporal.connection import connect, runtime_for  # noqa: E402
from genesis.temporal.settings import temporal_settings  # noqa: E402

pytestmark = [pytest.mark.temporal]


def settings_of(**values: str):
    return temporal_settings({k: Setting(v, "env") for k, v in values.items()}, "box")


@activity.defn(name="metrics_probe")
async def probe(word: str) -> str:
    return word


@workflow.defn(name="MetricsProbe", sandboxed=False)
class Probe:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity("metrics_probe", "done", start_to_close_timeout=timedelta(seconds=30))


def test_no_endpoint_by_default_and_a_bad_address_is_refused_saying_the_form():
    assert settings_of().metrics == "" and runtime_for(settings_of()) is None
    with pytest.raises(ConfigError, match="GENESIS_TEMPORAL_METRICS='9464'.*HOST:PORT"):
        settings_of(GENESIS_TEMPORAL_METRICS="9464")


def test_the_sdks_metrics_are_served_for_prometheus_tagged_with_the_machine(dev_server):
    address = f"127.0.0.1:{free_port()}"
    settings = settings_of(GENESIS_TEMPORAL_ADDRESS=dev_server.address, GENESIS_TEMPORAL_METRICS=address,
                           GENESIS_TEMPORAL_HOST="m1")

    async def run():
        client = await connect(settings, "test-metrics", {})
        queue = f"m{uuid.uuid4().hex[:8]}"
        async with Worker(client, task_queue=queue, workflows=[Probe], activities=[probe]):
            return await client.execute_workflow(Probe.run, id=queue, task_queue=queue)

    assert asyncio.run(run()) == "done"
    text = urllib.request.urlopen(f"http://{address}/metrics", timeout=10).read().decode()
    for name in ("temporal_activity_schedule_to_start_latency", "temporal_workflow_task_schedule_to_start_latency",
                 "temporal_activity_execution_latency"):
        assert name in text, name
    assert 'genesis_host="m1"' in text


def test_a_port_another_process_holds_is_a_clear_error():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match="cannot serve the metrics there"):
            runtime_for(settings_of(GENESIS_TEMPORAL_METRICS=f"127.0.0.1:{port}", GENESIS_TEMPORAL_HOST="m2"))

"""summary.json against its JSON Schema (docs/schemas/summary.schema.json):
the document the runner writes, built by the results code from runs that
have every optional part (signals, queueing, a victim) and none of them.
tests/integration/test_scenarios.py validates the real ones."""
import json
from pathlib import Path

import jsonschema
import pytest

from testbed.fabric.signals import SignalSettings
from testbed.nic.deployed_ack_timer import DEPLOYED_RC
from testbed.workload.emulation_health import HealthSample, health_between
from testbed.workload.results import aggregate, run_metrics
from testbed.workload.run_scenario import (SUMMARY_SCHEMA_VERSION,
                                           summary_document)
from testbed.workload.runner import FlowRecord, TransportRun
from testbed.workload.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]
SCHEMA = REPO / 'docs' / 'schemas' / 'summary.schema.json'
PATHS = ('fcbb:bb01:1000:8001::', 'fcbb:bb02:1000:8001::')


def validator():
    return jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))


def health() -> dict:
    # Two real samples' worth of counters: 1 s of wall time, 0.1 s of CPU.
    return health_between(HealthSample(0.0, 0.0, (1000, 600), 0, 10),
                          HealthSample(1.0, 0.1, (1400, 800), 0, 5010), [])


def every_part(transport: str, delivered: int) -> TransportRun:
    """A run with signals, NSCC's delay histogram and an incast victim."""
    run = TransportRun(transport, 0)
    run.flows = [FlowRecord(1, 0, 'h1', 'h5', 1000, started=0.0, finished=1.0,
                            status='done', delivered=delivered),
                 FlowRecord(2, 0, 'h2', 'h6', 500, label='victim', started=0.0,
                            finished=0.5, status='done', delivered=500)]
    run.steps = (range(0, 1),)
    run.goodput_bins = [10.0] * 100
    run.plane_bins = {1: [5.0] * 100, 2: [5.0] * 100}
    run.path_bytes = dict.fromkeys(PATHS, 100)
    run.events = [{'t': 0.3, 'fault': 'link_down', 'a': 'p1a0x0', 'b': 'p1c0'}]
    run.elapsed_s = 1.0
    run.health = health()
    run.signals = SignalSettings(True, True, 3000, 12000).describe()
    run.switch_ports = {'p1c0-eth1': {'ce_marked': 4, 'trimmed': 1,
                                      'queue_drops': 0}}
    run.port_links = {'p1c0-eth1': ('p1c0', 'p1a0x0')}
    run.port_planes = {'p1c0-eth1': 1}
    run.delay_histogram = [5, 3, 2, 0, 1]
    run.delay_target_s = 0.004
    run.transport_counters = {'packet_timeouts': 3, 'nacks': 1, 'ack_timer_stalls': 1,
                              'ack_timer_stalled_qps': 1, 'ack_timer_hardware_timeouts': 1,
                              'ack_timer_stalled_at_end': 0}
    run.deployed_ack_timer = DEPLOYED_RC.describe(12.0)
    return run


def none_of_them(transport: str) -> TransportRun:
    """A run whose flow failed, on a fabric that does not signal."""
    run = TransportRun(transport, 0)
    run.flows = [FlowRecord(1, 0, 'h1', 'h5', 1000, started=0.0,
                            status='failed', error='retry counter exceeded',
                            delivered=300)]
    run.goodput_bins = [3.0] * 10
    run.elapsed_s = 0.1
    run.aborted, run.aborted_at = 'phase 0: a flow failed', 0.1
    run.health = health()
    return run


def document() -> dict:
    scenario = load_scenario(REPO / 'scenarios' / 'link_failure_allreduce.yaml')
    per_transport = {
        # Two repetitions: their medians of whole numbers can be halves.
        'mrc': [every_part('mrc', 1000), every_part('mrc', 999)],
        'rc': [none_of_them('rc')],
    }
    summary = {t: aggregate([run_metrics(r, set(PATHS), (1, 2),
                                         scenario.plan(), 10.0) for r in runs])
               for t, runs in per_transport.items()}
    meta = {'started_utc': '2026-12-01 12:00:00', 'quick': True,
            'machine': 'host, 6.18, 2 cores'}
    # As written to disk and read back.
    return json.loads(json.dumps(summary_document(scenario, summary, meta),
                                 default=str))


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA.read_text()))


def test_a_summary_with_every_part_and_with_none_validates():
    doc = document()
    assert doc['schema_version'] == SUMMARY_SCHEMA_VERSION == 1
    mrc, rc = doc['transports']['mrc'], doc['transports']['rc']
    assert mrc['signals'] and mrc['queueing_delay'] and mrc['victim']
    assert mrc['bytes_delivered'] == 1499.5     # 1000 + 500, 999 + 500
    assert rc['signals'] is None and rc['victim'] is None
    assert mrc['deployed_ack_timer']['timeout_s'] == 4.295 and rc['deployed_ack_timer'] is None
    assert [e.message for e in validator().iter_errors(doc)] == []


@pytest.mark.parametrize('change', [
    lambda d: d.update(schema_version=2),
    lambda d: d.pop('started_utc'),
    lambda d: d['transports']['mrc'].update(undocumented_field=1),
    lambda d: d['transports']['mrc'].pop('goodput_mbps'),
    lambda d: d['transports']['mrc']['health'].update(trusted='yes'),
    lambda d: d['transports']['mrc']['recovery'][0].pop('recovery_s'),
    lambda d: d['transports']['mrc']['signals'].update(extra=0),
    lambda d: d['transports']['rc'].update(victim={'mbps': 1}),
    lambda d: d['transports']['mrc']['deployed_ack_timer'].pop('budget_s'),
], ids=['version', 'missing top-level', 'undocumented field',
        'missing metric', 'wrong type', 'recovery without time',
        'signals extra', 'victim incomplete', 'deployed timer incomplete'])
def test_the_schema_refuses_what_the_writer_does_not_write(change):
    doc = document()
    change(doc)
    assert list(validator().iter_errors(doc))

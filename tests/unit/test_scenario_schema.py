"""The scenario JSON Schema (docs/schemas/scenario.schema.json) against the
loader it is built from: the shipped copy is the generator's output, every
shipped scenario passes both, and bad scenarios are refused by both (or,
where only the topology or a rule across fields can tell, by the loader,
which is the documented direction of their difference)."""
import copy
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from testbed.workload import scenario_schema
from testbed.workload.scenario import ScenarioError, parse_scenario

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / 'docs' / 'schemas' / 'scenario.schema.json'
SCENARIOS = sorted((REPO / 'scenarios').glob('*.yaml'))
DEFAULT = REPO / 'scenarios' / 'link_failure_allreduce.yaml'


def validator():
    return jsonschema.Draft202012Validator(json.loads(SHIPPED.read_text()))


def schema_errors(data) -> list[str]:
    return [e.message for e in validator().iter_errors(data)]


def loader_refuses(data) -> bool:
    try:
        parse_scenario(data, REPO / 'scenarios')
    except ScenarioError:
        return True
    return False


def test_the_shipped_schema_is_the_generated_one():
    assert SHIPPED.read_text() == scenario_schema.schema_text(), (
        'regenerate: python -m testbed.workload.scenario_schema > %s'
        % SHIPPED.relative_to(REPO))


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(json.loads(SHIPPED.read_text()))


@pytest.mark.parametrize('path', SCENARIOS, ids=lambda p: p.stem)
def test_every_shipped_scenario_passes_the_schema_and_the_loader(path):
    data = yaml.safe_load(path.read_text())
    assert schema_errors(data) == []
    assert not loader_refuses(data)


def mutate(path: str, value):
    """The default scenario with one field (a dotted path, list indices as
    numbers) set to `value`, or deleted when value is DELETE."""
    data = yaml.safe_load(DEFAULT.read_text())
    *parents, last = [int(p) if p.isdigit() else p for p in path.split('.')]
    node = data
    for key in parents:
        node = node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = copy.deepcopy(value)
    return data


DELETE = object()
# (field, value): refused by the schema and by the loader alike.
BAD = [
    ('bogus', 1),
    ('name', DELETE),
    ('name', 'Has Spaces'),
    ('name', '../up'),
    ('topology', 'mesh,k=4'),
    ('topology', 7),
    ('link_rate_mbit', 0),
    ('link_rate_mbit', True),
    ('link_rate_mbit', '10'),
    ('duration_s', -1),
    ('transports', []),
    ('transports', ['mrc', 'quic']),
    ('transports', ['mrc', 'mrc']),
    ('workload.type', 'broadcast'),
    ('workload.size_mb', DELETE),
    ('workload.size_mb', 0),
    ('workload.chunk_mb', 1),
    ('workload.hosts', ['h1']),
    ('workload.iterations', 0),
    ('faults', {'at': 3}),
    ('faults.0.type', 'meteor'),
    ('faults.0.at', DELETE),
    ('faults.0.at', -1),
    ('faults.0.link', ['p1a0x0']),
    ('faults.0.link', ['p1a0x0', 'p1c0', 'p1a1x0']),
    ('faults.0.plane', 1),
    ('faults.0', {'at': 2, 'type': 'gray_failure', 'link': ['p1a0x0', 'p1c0'],
                  'loss_pct': 101}),
    ('faults.0', {'at': 2, 'type': 'gray_failure', 'link': ['p1a0x0', 'p1c0'],
                  'loss_pct': 0}),
    ('faults.0', {'at': 2, 'type': 'plane_down', 'plane': 0}),
    ('faults.0', {'at': 2, 'type': 'link_flap', 'link': ['p1a0x0', 'p1c0'],
                  'period_s': 2}),
    ('seed', 'one'),
    ('repetitions', 0),
    ('quick.name', 'other'),
    ('quick.transports', ['mrc']),
    ('quick.workload.chunk_mb', 1),
    ('quick.faults.0.type', 'meteor'),
    ('quick.duration_s', 0),
]


@pytest.mark.parametrize('field,value', BAD, ids=[
    '%s=%r' % (f, '<deleted>' if v is DELETE else v) for f, v in BAD])
def test_a_bad_scenario_is_refused_by_the_schema_and_the_loader(field, value):
    data = mutate(field, value)
    assert schema_errors(data), 'the schema accepts %s=%r' % (field, value)
    assert loader_refuses(data), 'the loader accepts %s=%r' % (field, value)


# Only the loader can tell: names against the topology, rules across
# fields, 1.0 from 1 (JSON Schema counts 1.0 as an integer). The schema
# accepts these; docs/scenarios.md says so.
LOADER_ONLY = [
    ('workload.hosts', ['h1', 'h99']),
    ('faults.0.link', ['p1a0x0', 'p1c9']),
    ('faults.0.at', 50),
    ('seed', 1.0),
    ('topology', 'fattree,k=3'),
]


@pytest.mark.parametrize('field,value', LOADER_ONLY,
                         ids=['%s=%r' % fv for fv in LOADER_ONLY])
def test_what_only_the_loader_refuses(field, value):
    data = mutate(field, value)
    assert schema_errors(data) == []
    assert loader_refuses(data)


def test_a_key_without_a_schema_entry_is_named(monkeypatch):
    monkeypatch.setattr(scenario_schema, 'TOP_LEVEL_KEYS',
                        scenario_schema.TOP_LEVEL_KEYS + ('new_key',))
    with pytest.raises(scenario_schema.SchemaGap, match="'new_key'.*KEY_SCHEMAS"):
        scenario_schema.scenario_schema()

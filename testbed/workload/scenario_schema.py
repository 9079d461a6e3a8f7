"""The scenario format as a JSON Schema, built from the loader's own tables.

`docs/schemas/scenario.schema.json` is this module's output (a test keeps
the copy equal; `python -m testbed.workload.scenario_schema` prints it), so
an editor validating a scenario YAML file against it sees the keys, types,
ranges, workload types and fault kinds the loader (`scenario.py`) accepts.
What needs the topology (that a host, switch or link exists), a rule
across fields (a fault before `duration_s`, a victim sharing the
receiver's last hop) or tells 1 from 1.0 is the loader's alone: the schema
accepts some files the loader refuses, never the other way round.

Adding a scenario key: give it an entry in `KEY_SCHEMAS` (a top-level key)
or `WORKLOAD_PARAM_SCHEMAS` (a workload parameter); without one, building
the schema fails and says which. Fault kinds come from the catalogue.
"""
from __future__ import annotations

import json
from typing import Any

from testbed.fabric.faults.catalogue import FAULT_KINDS, FaultKind, Param
from testbed.fabric.topo_spec import TOPOLOGIES
from testbed.nic.hardware_profile import HARDWARE_PROFILES
from testbed.workload.scenario import (MAX_QPS_PER_CONNECTION, MIN_SNAPLEN,
                                       NAME_PATTERN, NOT_IN_QUICK,
                                       REQUIRED_KEYS, TOP_LEVEL_KEYS,
                                       WORKLOAD_PARAMS)
from testbed.workload.transports import TRANSPORTS
from testbed.workload.transports import NAMES as TRANSPORT_NAMES

DRAFT = 'https://json-schema.org/draft/2020-12/schema'

POSITIVE = {'type': 'number', 'exclusiveMinimum': 0}
COUNT = {'type': 'integer', 'minimum': 1}
HOST = {'type': 'string', 'pattern': '^h[1-9][0-9]*$',
        'description': 'a host of the topology: h1..hN'}
HOSTS = {'type': 'array', 'items': HOST, 'uniqueItems': True}

KEY_SCHEMAS: dict[str, dict] = {
    'name': {'type': 'string', 'pattern': '^%s$' % NAME_PATTERN.pattern,
             'description': 'names the results directory'},
    'description': {'type': 'string'},
    'topology': {'type': 'string',
                 'pattern': r'^\s*(%s)\s*(,.*)?$' % '|'.join(sorted(TOPOLOGIES)),
                 'description': 'a Mininet-style spec, e.g. '
                 'fattree,k=4,planes=2; no bw= (link_rate_mbit shapes it)'},
    'link_rate_mbit': POSITIVE,
    'transports': {'type': 'array', 'minItems': 1, 'uniqueItems': True,
                   'items': {'enum': list(TRANSPORT_NAMES)}},
    'duration_s': POSITIVE,
    'seed': {'type': 'integer'},
    'repetitions': COUNT,
    'cc': {'type': 'object', 'additionalProperties': False,
           'properties': {t.name: {'enum': list(t.congestion_controls)}
                          for t in TRANSPORTS.values()},
           'description': 'the congestion control of each transport (default: '
           'mrc NSCC, rc and ecmp dcqcn, tcp and mptcp cubic)'},
    'qps_per_connection': {
        'type': 'object', 'additionalProperties': False,
        'properties': {t.name: {'type': 'integer', 'minimum': 1,
                                'maximum': MAX_QPS_PER_CONNECTION}
                       for t in TRANSPORTS.values() if t.splits_over_qps},
        'description': 'QPs per connection of rc and ecmp, each flow split over '
        'them (NCCL_IB_QPS_PER_CONNECTION; default 1, as NCCL ships)'},
    'fabric_modes': {'type': 'object',
                     'properties': {t.name: {'enum': list(t.fabrics)}
                                    for t in TRANSPORTS.values()},
                     'additionalProperties': False,
                     'description': 'the fabric mode of a transport the '
                     'scenario runs (srv6 or routed; docs/routed-fabric.md)'},
    'convergence_delay_s': {'type': 'number', 'minimum': 0,
                            'description': 'the routed mode: port-status to '
                            'repaired ECMP groups'},
    'hardware': {'enum': [*HARDWARE_PROFILES, 'none'],
                 'description': 'the hardware the fabric stands for: its MTU on '
                 'the links (unless the topology names mtu=), packets in '
                 'flight and timers scaled to it (docs/timescale.md)'},
    'capture': {'type': 'object', 'additionalProperties': False,
                'minProperties': 1,
                'properties': {
                    'links': {'type': 'array', 'uniqueItems': True,
                              'items': {'type': 'array',
                                        'items': {'type': 'string'},
                                        'minItems': 2, 'maxItems': 2}},
                    'hosts': HOSTS,
                    'snaplen': {'type': 'integer', 'minimum': MIN_SNAPLEN}},
                'description': 'pcaps of these links (a toward b) and '
                'host ports into the results directory'},
    # workload, faults and quick are built below from their own tables.
}

WORKLOAD_PARAM_SCHEMAS: dict[str, dict] = {
    'src': HOST, 'dst': HOST, 'receiver': HOST,
    'size_mb': POSITIVE, 'count': COUNT, 'iterations': COUNT, 'fan_in': COUNT,
    'hosts': dict(HOSTS, minItems=2), 'senders': dict(HOSTS, minItems=1),
    'victim': {'type': 'object', 'required': ['src', 'dst'],
               'properties': {'src': HOST, 'dst': HOST, 'size_mb': POSITIVE},
               'additionalProperties': False},
    'file': {'type': 'string',
             'description': 'an htsim .cm file, relative to the scenario'},
}

FAULT_PARAM_SCHEMAS: dict[str, dict] = {
    'link': {'type': 'array', 'items': {'type': 'string'},
             'minItems': 2, 'maxItems': 2,
             'description': 'two node names with a link between them'},
    'switch': {'type': 'string'},
    'plane': {'type': 'integer', 'minimum': 1},
    'host': HOST,
    'count': COUNT,
}


class SchemaGap(KeyError):
    """A key the loader accepts that the schema has no entry for."""

    def __str__(self) -> str:
        return str(self.args[0])


def scenario_schema() -> dict:
    keys = {key: _key(key) for key in TOP_LEVEL_KEYS if key != 'quick'}
    keys['quick'] = _quick(keys)
    return {'$schema': DRAFT,
            'title': 'mrc-testbed scenario',
            'description': 'One experiment (docs/scenarios.md).',
            'type': 'object', 'required': list(REQUIRED_KEYS),
            'properties': keys, 'additionalProperties': False}


def _key(key: str) -> dict:
    if key == 'workload':
        return {'oneOf': [_workload(kind) for kind in WORKLOAD_PARAMS]}
    if key == 'faults':
        return {'type': 'array',
                'items': {'oneOf': [_fault(k) for k in FAULT_KINDS.values()]}}
    if key not in KEY_SCHEMAS:
        raise SchemaGap('scenario key %r has no JSON Schema: add it to '
                        'KEY_SCHEMAS in %s' % (key, __name__))
    return KEY_SCHEMAS[key]


def _workload(kind: str) -> dict:
    required, optional = WORKLOAD_PARAMS[kind]
    return {'type': 'object', 'title': kind,
            'required': ['type', *required],
            'properties': {'type': {'const': kind},
                           **{p: _workload_param(p)
                              for p in required + optional}},
            'additionalProperties': False}


def _workload_param(name: str) -> dict:
    if name not in WORKLOAD_PARAM_SCHEMAS:
        raise SchemaGap('workload parameter %r has no JSON Schema: add it to '
                        'WORKLOAD_PARAM_SCHEMAS in %s' % (name, __name__))
    return WORKLOAD_PARAM_SCHEMAS[name]


def _fault(kind: FaultKind) -> dict:
    return {'type': 'object', 'title': kind.name, 'description': kind.doc,
            'required': ['at', 'type', *kind.required],
            'properties': {'at': {'type': 'number', 'minimum': 0},
                           'type': {'const': kind.name},
                           **{p.name: _fault_param(p) for p in kind.params}},
            'additionalProperties': False}


def _fault_param(param: Param) -> dict:
    if param.type == 'number':
        schema: dict[str, Any] = {'type': 'number'}
        if param.above is not None:
            schema['exclusiveMinimum'] = param.above
        if param.most is not None:
            schema['maximum'] = param.most
    elif param.type in FAULT_PARAM_SCHEMAS:
        schema = dict(FAULT_PARAM_SCHEMAS[param.type])
    else:
        raise SchemaGap('fault parameter type %r has no JSON Schema: add it '
                        'to FAULT_PARAM_SCHEMAS in %s' % (param.type, __name__))
    return dict(schema, description=param.doc) if param.doc else schema


def _quick(keys: dict[str, dict]) -> dict:
    """Overrides of any key but name, transports and topology; a workload
    override may give only the parameters it changes (it merges)."""
    params = sorted({p for req, opt in WORKLOAD_PARAMS.values()
                     for p in req + opt})
    partial_workload = {
        'type': 'object',
        'properties': {'type': {'enum': list(WORKLOAD_PARAMS)},
                       **{p: _workload_param(p) for p in params}},
        'additionalProperties': False}
    allowed = {k: partial_workload if k == 'workload' else keys[k]
               for k in TOP_LEVEL_KEYS if k not in NOT_IN_QUICK}
    return {'type': 'object', 'properties': allowed,
            'additionalProperties': False,
            'description': 'overrides for --quick (docs/scenarios.md#quick)'}


def schema_text() -> str:
    return json.dumps(scenario_schema(), indent=2) + '\n'


if __name__ == '__main__':
    print(schema_text(), end='')

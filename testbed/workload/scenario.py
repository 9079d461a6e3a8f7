"""Scenario files: load, validate, and hand the runner typed values.

A scenario is one YAML mapping (format: docs/scenarios.md). Loading has no
side effects: it reads the file (and a connection matrix it names), builds
the topology's Mininet `Topo` object and uSID plan in memory to check every
host, switch, link and plane named, and returns frozen dataclasses. Every
refusal is a `ScenarioError` naming the file, the field path and the
problem.
"""
from __future__ import annotations

import difflib
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from testbed.fabric.faults.catalogue import FAULT_KINDS, Param
from testbed.fabric.topo_spec import TopoSpecError, parse_topo_spec
from testbed.workload.connection_matrix import (
    ConnectionMatrixError, load_cm, matrix_to_workload, node_host)
from testbed.workload.transports import NAMES as TRANSPORT_NAMES
from testbed.nic.wire import BTH_LEN, INNER_HEADERS_LEN, IPV6_HEADER_LEN
from testbed.workload.model import (CaptureSpec, ConnectionMatrix, FabricOf,
                                    Fault, Scenario, Victim, WorkloadSpec,
                                    fabric_of)
from testbed.nic.hardware_profile import HARDWARE_PROFILES
from testbed.workload.transports import transport as transport_info
from testbed.workload.workloads import check_shares_last_hop

REQUIRED_KEYS = ('name', 'topology', 'link_rate_mbit', 'transports',
                 'workload', 'duration_s')
OPTIONAL_KEYS = ('description', 'cc', 'faults', 'seed', 'repetitions', 'quick',
                 'capture', 'hardware', 'fabric_modes', 'convergence_delay_s',
                 'qps_per_connection')
# NCCL's bound on QPs per connection (NCCL_IB_MAX_QPS in its IB transport).
MAX_QPS_PER_CONNECTION = 128
TOP_LEVEL_KEYS = REQUIRED_KEYS + OPTIONAL_KEYS
NOT_IN_QUICK = ('name', 'transports', 'topology', 'cc', 'quick')
NAME_PATTERN = re.compile(r'[a-z0-9_-]{1,64}')

# type -> (required params, optional params); every type also has 'type'
WORKLOAD_PARAMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    'point_to_point': (('src', 'dst', 'size_mb'), ('count',)),
    'permutation': (('size_mb',), ('hosts',)),
    'incast': (('receiver', 'size_mb'), ('senders', 'fan_in', 'victim')),
    'ring_allreduce': (('size_mb',), ('hosts', 'iterations')),
    'all_to_all': (('size_mb',), ('hosts',)),
    'connection_matrix': (('file',), ()),
}
WORKLOAD_TYPES = tuple(WORKLOAD_PARAMS)
CAPTURE_KEYS = ('links', 'hosts', 'snaplen')
# The shortest snap length that still shows every MRC packet's BTH: Ethernet, the outer
# IPv6 header, the inner IPv6 + UDP headers, the BTH (an SRH or the body needs more).
MIN_SNAPLEN = 14 + IPV6_HEADER_LEN + INNER_HEADERS_LEN + BTH_LEN



class ScenarioError(ValueError):
    """A scenario refused: `file`, `field` (e.g. ``faults[2].link``) and
    `problem` are also kept apart for callers that want them."""

    def __init__(self, file: str, field: str, problem: str) -> None:
        self.file, self.field, self.problem = file, field, problem
        where = '%s: %s' % (file, field) if field else file
        super().__init__('%s: %s' % (where, problem))


class _Invalid(Exception):
    """Raised inside validation; parse_scenario adds the file name."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(field, problem)
        self.field, self.problem = field, problem


# -- entry points --------------------------------------------------------------

def load_scenario(path: str | Path) -> Scenario:
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise ScenarioError(str(path), '', 'cannot read: %s' % (
            getattr(err, 'strerror', None) or err)) from None
    data = _safe_yaml(str(path), text)
    return parse_scenario(data, path.parent, source=str(path),
                          source_text=text)


def parse_scenario(mapping: Any, base_dir: str | Path, *,
                   source: str = '<scenario>',
                   source_text: str = '') -> Scenario:
    """Validate a loaded mapping; `base_dir` anchors relative file paths."""
    try:
        full = _scenario(mapping, Path(base_dir), source, source_text)
        quick = _quick(mapping, Path(base_dir), source, source_text)
    except _Invalid as err:
        raise ScenarioError(source, err.field, err.problem) from None
    return replace(full, quick=quick)


def _safe_yaml(source: str, text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.constructor.ConstructorError as err:
        if 'constructor for the tag' not in str(err.problem):
            raise ScenarioError(source, '', 'not valid YAML: %s' % err) \
                from None
        raise ScenarioError(source, '', 'not safe YAML: %s (scenario files '
                            'hold only mappings, lists, strings and numbers)'
                            % err.problem) from None
    except yaml.YAMLError as err:
        raise ScenarioError(source, '', 'not valid YAML: %s' % err) from None


def _scenario(data: Any, base_dir: Path, source: str,
              source_text: str) -> Scenario:
    data = _mapping(data, '', REQUIRED_KEYS, OPTIONAL_KEYS,
                    what='a scenario (a mapping of keys)')
    name = _name(data['name'])
    hardware = _hardware(data.get('hardware'))
    topology = sized_for(_topology(data['topology']), hardware)
    fabric = fabric_of(topology)
    duration = _number(data['duration_s'], 'duration_s', above=0)
    return Scenario(
        name=name,
        description=_string(data.get('description', ''), 'description'),
        topology=topology,
        link_rate_mbit=_number(data['link_rate_mbit'], 'link_rate_mbit',
                               above=0),
        transports=_transports(data['transports']),
        cc=_cc(data.get('cc', {})),
        qps_per_connection=_qps_per_connection(data.get('qps_per_connection', {})),
        fabric_modes=_fabric_modes(data.get('fabric_modes', {}),
                                   _transports(data['transports'])),
        convergence_delay_s=None if data.get('convergence_delay_s') is None
        else _number(data['convergence_delay_s'], 'convergence_delay_s', least=0),
        workload=_workload(data['workload'], fabric, base_dir),
        faults=_faults(data.get('faults', []), fabric, duration),
        duration_s=duration,
        seed=_integer(data.get('seed', 1), 'seed'),
        repetitions=_integer(data.get('repetitions', 1), 'repetitions',
                             least=1),
        capture=_capture(data.get('capture'), fabric),
        hardware=hardware,
        source_path=source, source_text=source_text)


def _quick(data: Mapping, base_dir: Path, source: str,
           source_text: str) -> Scenario | None:
    if 'quick' not in data:
        return None
    overrides = _mapping(data['quick'], 'quick', (),
                         tuple(k for k in TOP_LEVEL_KEYS
                               if k not in NOT_IN_QUICK),
                         refused=NOT_IN_QUICK)
    merged = {k: v for k, v in _deep_merge(data, overrides).items()
              if k != 'quick'}
    if _changes_workload_type(data.get('workload'), overrides.get('workload')):
        # another type shares no parameters with the base one: replace it
        merged['workload'] = overrides['workload']
    try:
        quick = _scenario(merged, base_dir, source, source_text)
    except _Invalid as err:
        raise _Invalid('%s (quick form)' % err.field, err.problem) from None
    return replace(quick, is_quick=True)


def _changes_workload_type(base: Any, override: Any) -> bool:
    return isinstance(base, Mapping) and isinstance(override, Mapping) \
        and 'type' in override and override['type'] != base.get('type')


def _deep_merge(base: Mapping, overrides: Mapping) -> dict:
    """Mappings merge key by key (so quick can change one workload
    parameter); anything else, lists included, is replaced."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


# -- the fabric the names are checked against ----------------------------------

def _topology(value: Any) -> str:
    text = _string(value, 'topology')
    try:
        spec = parse_topo_spec(text)
    except TopoSpecError as err:
        raise _Invalid('topology', str(err)) from None
    if 'bw' in spec.kwargs():
        raise _Invalid('topology', 'remove bw=%g: every link is shaped to '
                       'link_rate_mbit' % spec.kwargs()['bw'])
    return str(spec)


# -- top-level fields ----------------------------------------------------------

def _name(value: Any) -> str:
    name = _string(value, 'name')
    if not NAME_PATTERN.fullmatch(name):
        raise _Invalid('name', '%r may use only a-z, 0-9, "_" and "-" (1-64 '
                       'characters): it names the results directory, so no '
                       '"/", "." or ".."' % name)
    return name


def _transports(value: Any) -> tuple[str, ...]:
    items = _list(value, 'transports')
    if not items:
        raise _Invalid('transports', 'empty: name at least one of %s'
                       % ', '.join(TRANSPORT_NAMES))
    seen: list[str] = []
    for i, item in enumerate(items):
        where = 'transports[%d]' % i
        _choice(item, where, TRANSPORT_NAMES, 'transport')
        if item in seen:
            raise _Invalid(where, '%r is listed twice' % item)
        seen.append(item)
    return tuple(seen)


def _cc(value: Any) -> tuple[tuple[str, str], ...]:
    """transport -> congestion control, one the transport can run
    (TransportInfo.congestion_controls)."""
    choices = _mapping(value, 'cc', (), TRANSPORT_NAMES,
                       what='a mapping of transport to congestion control')
    return tuple((name, _choice(algorithm, 'cc.%s' % name,
                                transport_info(name).congestion_controls,
                                'congestion control'))
                 for name, algorithm in sorted(choices.items()))


def _qps_per_connection(value: Any) -> tuple[tuple[str, int], ...]:
    """transport -> QPs per connection, for transports that split a flow
    over several (TransportInfo.splits_over_qps: rc, ecmp)."""
    chosen = _mapping(value, 'qps_per_connection', (), TRANSPORT_NAMES,
                      what='a mapping of transport to QPs per connection')
    out = []
    for name, count in sorted(chosen.items()):
        where = 'qps_per_connection.%s' % name
        if not transport_info(name).splits_over_qps:
            raise _Invalid(where, '%s keeps one QP per connection (only rc and '
                           'ecmp split a flow over several)' % name)
        count = _integer(count, where, least=1)
        if count > MAX_QPS_PER_CONNECTION:
            raise _Invalid(where, 'at most %d (NCCL\'s limit), got %d'
                           % (MAX_QPS_PER_CONNECTION, count))
        out.append((name, count))
    return tuple(out)


def _fabric_modes(value: Any, transports: tuple[str, ...]
                  ) -> tuple[tuple[str, str], ...]:
    """transport -> fabric mode, for transports the scenario runs and modes
    they can run on (testbed.workload.transports)."""
    modes = _mapping(value, 'fabric_modes', (), None)
    out = []
    for name, mode in sorted(modes.items()):
        where = 'fabric_modes.%s' % name
        if name not in transports:
            raise _Invalid(where, '%r is not among the transports' % name)
        _choice(mode, where, transport_info(name).fabrics,
                'fabric mode for %s' % name)
        out.append((name, mode))
    return tuple(out)


# -- workload ------------------------------------------------------------------

def _workload(value: Any, fabric: FabricOf, base_dir: Path) -> WorkloadSpec:
    kind = _choice(_mapping(value, 'workload', ('type',), None).get('type'),
                   'workload.type', WORKLOAD_TYPES, 'workload type')
    required, optional = WORKLOAD_PARAMS[kind]
    params = _mapping(value, 'workload', ('type',) + required, optional)
    checked = {key: _WORKLOAD_CHECKS[key](params[key], 'workload.' + key,
                                          fabric, base_dir)
               for key in params if key != 'type'}
    if 'file' in checked:
        checked['file'], checked['matrix'] = checked['file']
    if 'victim' in checked:
        # without its own size the victim sends what each incast sender does
        victim = checked['victim']
        checked['victim'] = Victim(victim['src'], victim['dst'],
                                   victim.get('size_mb', checked['size_mb']))
    spec = WorkloadSpec(kind, **checked)
    _CROSS_CHECKS.get(kind, lambda s, f: None)(spec, fabric)
    return spec


def _check_point_to_point(spec: WorkloadSpec, fabric: FabricOf) -> None:
    if spec.src == spec.dst:
        raise _Invalid('workload.dst', 'same host as src (%s)' % spec.src)


def _check_collective(spec: WorkloadSpec, fabric: FabricOf) -> None:
    members = len(spec.hosts or fabric.plan.hosts)
    if spec.size_bytes < members:
        raise _Invalid('workload.size_mb', '%g MB cannot be split among %d '
                       'hosts' % (spec.size_mb, members))


def _check_incast(spec: WorkloadSpec, fabric: FabricOf) -> None:
    if bool(spec.senders) == (spec.fan_in is not None):
        raise _Invalid('workload', 'give either senders (a list of hosts) '
                       'or fan_in (how many), not both nor neither')
    if spec.receiver in spec.senders:
        raise _Invalid('workload.senders', 'includes the receiver %s'
                       % spec.receiver)
    victim = spec.victim
    if victim is not None:
        _check_victim(spec, victim, fabric)
    taken = {spec.receiver} | ({victim.src, victim.dst} if victim else set())
    available = len([h for h in fabric.plan.hosts if h not in taken])
    if spec.fan_in is not None and spec.fan_in > available:
        raise _Invalid('workload.fan_in', '%d senders but only %d hosts are '
                       'neither the receiver nor the victim\'s'
                       % (spec.fan_in, available))


def _check_victim(spec: WorkloadSpec, victim: Victim,
                  fabric: FabricOf) -> None:
    if victim.src == victim.dst:
        raise _Invalid('workload.victim.dst', 'same host as its src')
    if victim.src in (spec.receiver,) + spec.senders:
        raise _Invalid('workload.victim.src', '%s is already in the incast: '
                       'the victim must be a bystander' % victim.src)
    try:
        check_shares_last_hop(fabric.plan, spec.receiver, victim.dst)
    except ValueError as err:
        raise _Invalid('workload.victim.dst', str(err)) from None


_CROSS_CHECKS: dict[str, Callable[[WorkloadSpec, FabricOf], None]] = {
    'point_to_point': _check_point_to_point,
    'ring_allreduce': _check_collective,
    'all_to_all': _check_collective,
    'incast': _check_incast,
}


def _param_host(value, where, fabric, base_dir) -> str:
    return _host(value, where, fabric)


def _param_hosts(value, where, fabric, base_dir) -> tuple[str, ...]:
    hosts = _host_list(value, where, fabric)
    if len(hosts) < 2:
        raise _Invalid(where, 'needs two or more hosts')
    return hosts


def _param_senders(value, where, fabric, base_dir) -> tuple[str, ...]:
    senders = _host_list(value, where, fabric)
    if not senders:
        raise _Invalid(where, 'empty: list at least one sender')
    return senders


def _param_size(value, where, fabric, base_dir) -> float:
    return _number(value, where, above=0)


def _param_count(value, where, fabric, base_dir) -> int:
    return _integer(value, where, least=1)


def _param_victim(value, where, fabric, base_dir) -> dict[str, Any]:
    params = _mapping(value, where, ('src', 'dst'), ('size_mb',))
    checked: dict[str, Any] = {
        'src': _host(params['src'], where + '.src', fabric),
        'dst': _host(params['dst'], where + '.dst', fabric)}
    if 'size_mb' in params:
        checked['size_mb'] = _number(params['size_mb'], where + '.size_mb',
                                     above=0)
    return checked


def _param_file(value, where, fabric, base_dir) -> tuple[str, ConnectionMatrix]:
    path = (base_dir / _string(value, where)).resolve()
    try:
        matrix = load_cm(path)
        matrix_to_workload(matrix)      # refuses trigger chains we can't run
    except ConnectionMatrixError as err:
        raise _Invalid(where, str(err)) from None
    if matrix.failures:
        raise _Invalid(where, '%s has htsim "failure" lines: write them as '
                       'scenario faults instead' % path)
    hosts = set(fabric.plan.hosts)
    for conn in matrix.connections:
        for node in (conn.src, conn.dst):
            if node_host(node) not in hosts:
                raise _Invalid(where, '%s: node %d is %s, not a host of this '
                               'topology (%s)' % (path, node, node_host(node),
                                                  _host_range(fabric)))
    return str(path), matrix


_WORKLOAD_CHECKS: dict[str, Callable[..., Any]] = {
    'src': _param_host, 'dst': _param_host, 'receiver': _param_host,
    'size_mb': _param_size, 'count': _param_count, 'iterations': _param_count,
    'fan_in': _param_count, 'hosts': _param_hosts, 'senders': _param_senders,
    'victim': _param_victim, 'file': _param_file,
}


# -- faults --------------------------------------------------------------------

def _faults(value: Any, fabric: FabricOf, duration: float) -> tuple[Fault, ...]:
    return tuple(_fault(item, 'faults[%d]' % i, fabric, duration)
                 for i, item in enumerate(_list(value, 'faults')))


def _fault(value: Any, where: str, fabric: FabricOf, duration: float) -> Fault:
    name = _choice(_mapping(value, where, ('type', 'at'), None).get('type'),
                   where + '.type', tuple(FAULT_KINDS), 'fault type')
    kind = FAULT_KINDS[name]
    params = _mapping(value, where, ('type', 'at') + kind.required,
                      kind.optional)
    at = _number(params['at'], where + '.at', least=0)
    fault = Fault(name, at, **{
        p.name: _fault_param(p, params[p.name], '%s.%s' % (where, p.name),
                             fabric)
        for p in kind.params if p.name in params})
    problem = kind.problem(fault.params)
    if problem is not None:
        raise _Invalid('%s.%s' % (where, problem[0]), problem[1])
    if at >= duration:
        raise _Invalid(where + '.at', '%g s is not before the end of the run '
                       '(duration_s %g)' % (at, duration))
    if fault.end >= duration:
        raise _Invalid(where, '%s ends at %g s, not before the end of the run '
                       '(duration_s %g)' % (name, fault.end, duration))
    return fault


def _fault_param(param: Param, value: Any, where: str, fabric: FabricOf) -> Any:
    """A parameter checked by its type, against the topology."""
    if param.type == 'number':
        return _number(value, where, above=param.above, most=param.most)
    if param.type == 'count':
        return _integer(value, where, least=1)
    return _FAULT_CHECKS[param.type](value, where, fabric)


def _fault_link(value, where, fabric) -> tuple[str, str]:
    items = _list(value, where)
    if len(items) != 2 or not all(isinstance(x, str) for x in items):
        raise _Invalid(where, 'expected two node names, like [p1a0x0, p1c0]; '
                       'got %r' % (value,))
    a, b = (_node(x, '%s[%d]' % (where, i), fabric)
            for i, x in enumerate(items))
    if b not in fabric.neighbours(a):
        raise _Invalid(where, 'no link between %s and %s (%s links to %s)' % (
            a, b, a, ', '.join(fabric.neighbours(a))))
    return a, b


def _fault_switch(value, where, fabric) -> str:
    name = _string(value, where)
    if name not in fabric.plan.switches:
        raise _Invalid(where, 'no switch %r in this topology%s'
                       % (name, _did_you_mean(name, fabric.plan.switches)))
    return name


def _fault_plane(value, where, fabric) -> int:
    plane = _integer(value, where)
    if plane not in fabric.plan.planes:
        raise _Invalid(where, 'no plane %d (this topology has planes %s)' % (
            plane, ', '.join(map(str, fabric.plan.planes))))
    return plane


_FAULT_CHECKS: dict[str, Callable[..., Any]] = {
    'link': _fault_link,
    'switch': _fault_switch,
    'plane': _fault_plane,
    'host': lambda v, w, f: _host(v, w, f),
}


def sized_for(topology: str, hardware: str | None) -> str:
    """Under a hardware profile the links carry its packets: its MTU goes
    into the topology, unless the file names one there."""
    spec = parse_topo_spec(topology)
    if hardware is None or 'mtu' in spec.kwargs():
        return topology
    mtu = HARDWARE_PROFILES[hardware].mtu
    try:
        return str(parse_topo_spec('%s,mtu=%d' % (topology, mtu)))
    except TopoSpecError as err:
        raise _Invalid('hardware', '%s carries %d-byte packets, which this '
                       'topology cannot (%s): name a smaller mtu= in the topology'
                       % (hardware, mtu, err)) from None


def _hardware(value: Any) -> str | None:
    if value is None or value == 'none':
        return None
    name = _string(value, 'hardware')
    if name not in HARDWARE_PROFILES:
        raise _Invalid('hardware', 'unknown profile %r (known: %s, or none)'
                       % (name, ', '.join(HARDWARE_PROFILES)))
    return name


def _capture(value: Any, fabric: FabricOf) -> CaptureSpec | None:
    if value is None:
        return None
    data = _mapping(value, 'capture', (), CAPTURE_KEYS)
    if not data.get('links') and not data.get('hosts'):
        raise _Invalid('capture', 'names nothing to capture (give links, '
                       'hosts or both)')
    links = tuple(_fault_link(link, 'capture.links[%d]' % i, fabric)
                  for i, link in enumerate(_list(data.get('links', []),
                                                 'capture.links')))
    for i, link in enumerate(links):
        if link in links[:i]:
            raise _Invalid('capture.links[%d]' % i,
                           '%s-%s is listed twice' % link)
    hosts = _host_list(data.get('hosts', []), 'capture.hosts', fabric)
    snaplen = _integer(data.get('snaplen', CaptureSpec.snaplen),
                       'capture.snaplen', least=MIN_SNAPLEN)
    return CaptureSpec(links, hosts, snaplen)


# -- names ---------------------------------------------------------------------

def _host(value: Any, where: str, fabric: FabricOf) -> str:
    name = _string(value, where)
    if name not in fabric.plan.hosts:
        raise _Invalid(where, 'unknown host %r (this topology has %s)'
                       % (name, _host_range(fabric)))
    return name


def _host_list(value: Any, where: str, fabric: FabricOf) -> tuple[str, ...]:
    hosts = tuple(_host(h, '%s[%d]' % (where, i), fabric)
                  for i, h in enumerate(_list(value, where)))
    for i, host in enumerate(hosts):
        if host in hosts[:i]:
            raise _Invalid('%s[%d]' % (where, i), '%s is listed twice' % host)
    return hosts


def _node(name: str, where: str, fabric: FabricOf) -> str:
    if name not in fabric.nodes():
        raise _Invalid(where, 'no node %r in this topology%s'
                       % (name, _did_you_mean(name, fabric.nodes())))
    return name


def _host_range(fabric: FabricOf) -> str:
    hosts = fabric.plan.hosts
    return '%s..%s' % (hosts[0], hosts[-1]) if hosts else 'no hosts'


def _did_you_mean(name: str, known) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=3)
    return ' (did you mean %s?)' % ', '.join(close) if close else ''


# -- types ---------------------------------------------------------------------

def _mapping(value: Any, where: str, required: tuple[str, ...],
             optional: tuple[str, ...] | None, *, what: str = 'a mapping',
             refused: tuple[str, ...] = ()) -> dict:
    """Check a mapping's keys; `optional=None` skips the unknown-key check
    (used to read `type` before knowing which keys the type allows)."""
    if not isinstance(value, Mapping):
        raise _Invalid(where, 'expected %s, got %s' % (what, _kind(value)))
    prefix = where + '.' if where else ''
    if optional is not None:
        allowed = required + optional
        for key in value:
            if key in refused:
                raise _Invalid(prefix + str(key), 'cannot be overridden in '
                               'quick (allowed: %s)' % ', '.join(allowed))
            if key not in allowed:
                raise _Invalid(prefix + str(key), 'unknown key (allowed: %s)'
                               % ', '.join(allowed))
    for key in required:
        if key not in value:
            raise _Invalid(prefix + key, 'missing')
    return dict(value)


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise _Invalid(where, 'expected a list, got %s' % _kind(value))
    return value


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _Invalid(where, 'expected a string, got %s' % _kind(value))
    return value


def _choice(value: Any, where: str, choices: tuple[str, ...],
            what: str) -> str:
    if value not in choices or not isinstance(value, str):
        raise _Invalid(where, 'unknown %s %r (one of: %s)'
                       % (what, value, ', '.join(choices)))
    return value


def _number(value: Any, where: str, *, above: float | None = None,
            least: float | None = None, most: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value):
        raise _Invalid(where, 'expected a number, got %s' % _kind(value))
    if above is not None and not value > above:
        raise _Invalid(where, 'must be > %g, got %g' % (above, value))
    if least is not None and value < least:
        raise _Invalid(where, 'must be >= %g, got %g' % (least, value))
    if most is not None and value > most:
        raise _Invalid(where, 'must be <= %g, got %g' % (most, value))
    return float(value)


def _integer(value: Any, where: str, *, least: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(where, 'expected a whole number, got %s'
                       % _kind(value))
    if least is not None and value < least:
        raise _Invalid(where, 'must be >= %d, got %d' % (least, value))
    return value


def _kind(value: Any) -> str:
    if value is None:
        return 'nothing (null)'
    names = {bool: 'true/false', str: 'a string', int: 'a whole number',
             float: 'a number', list: 'a list', dict: 'a mapping'}
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + '...'
    return '%s %s' % (names.get(type(value), type(value).__name__), shown)

"""htsim connection matrices (``.cm``): read, write, and convert to and from
our workloads, so the same traffic runs here and in the UEC simulator htsim.

The format is the one `ConnectionMatrix::load` in htsim's
``sim/datacenter/connection_matrix.cpp`` reads (github.com/Broadcom/csg-htsim;
uet-htsim's copy, e.g. github.com/HLC-Lab/uet-htsim
``htsim/sim/datacenter/connection_matrix.cpp``, adds ``msg``)::

    Nodes 16
    Connections 3
    Triggers 1
    0->15 id 1 start 0 size 2000000 recv_done_trigger 1
    4->11 id 2 start 250 size 2000000 recv_done_trigger 1
    15->0 id 3 trigger 1 size 1000000
    trigger id 1 barrier count 2

- Header: ``Nodes N``, ``Connections C`` and, when used, ``Triggers T`` and
  ``Failures F``; the counts must match the lines that follow. ``#`` comment
  lines are allowed only in the header (htsim rejects them later).
- A connection: ``src->dst`` then key/value tokens in any order: ``id``
  (non-zero), ``start`` (microseconds: the simulators pass it through
  ``timeFromUs``), ``size`` (bytes), ``trigger`` (start when that trigger
  fires, instead of ``start``), ``send_done_trigger`` / ``recv_done_trigger``
  (fire that trigger when the flow is sent / received), ``prio``, ``msg [id]``
  and ``addon`` (uet-htsim extensions, kept for round trips).
- A trigger: ``trigger id T`` and one of ``oneshot``, ``multishot``,
  ``barrier`` (with ``count``: fires once that many flows signalled it).
- ``failure`` lines (htsim's own switch/link failures) are kept verbatim.

htsim's lexical rules, which the reader applies as they are:

- A line ends at ``\n``; tokens are separated by exactly one space
  (``getline(ss, s, ' ')``). One trailing space is harmless; a leading
  space, two spaces in a row or a tab make an empty or glued token, which
  htsim refuses as an unknown token (or aborts on, in ``stoi("")``).
- Every whole number goes through ``stoi`` into a C ``int``: above
  2^31 - 1 htsim aborts (``std::out_of_range``), so we refuse it.
- ``msg`` takes the next token as its id when ``stoi`` reads one there
  (``msg 0`` is refused: "Msg ID zero is not allowed"), else it stands
  alone (a message without id, read as ``msg=0``). A bare ``msg`` must not
  end the line: htsim would read the token past the end.
- ``id`` must come before ``trigger`` on a line (htsim asserts it has a
  flow id when it files the flow under its trigger).

Where the reader is stricter than htsim (files htsim takes, we refuse):

- a carriage return anywhere: htsim keeps it in the line's last token,
  which it then accepts after a number (``stoi`` stops at it) and refuses
  after a keyword (``addon``, ``barrier``, ...);
- numbers other than plain decimal digits (``stoi`` also takes a sign,
  leading blanks and trailing junk: ``12abc`` reads 12);
- unrecognised header lines, which htsim skips silently (``Nodes`` with a
  leading space or a tab is not read at all);
- ``start`` and ``trigger`` on one line in that order (htsim lets the
  trigger override the start), a missing or zero ``size`` (htsim leaves it
  undefined), a barrier with ``count`` 0.

Node ``i`` is our host ``h<i+1>``: both number hosts edge switch by edge
switch, pod by pod, so a k-ary fat-tree's node i sits in the same place in
both fabrics.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

from testbed.workload.model import (CmConnection, CmTrigger, ConnectionMatrix,
                                   Flow, Workload)

TRIGGER_KINDS = ('oneshot', 'multishot', 'barrier')
US_PER_S = 1_000_000
C_INT_MAX = 2**31 - 1            # htsim reads every whole number with stoi
FAILURE_SWITCH_TYPES = ('TOR', 'AGG', 'CORE')
_ENDPOINTS = re.compile(r'^(\d+)->(\d+)$')
_HOST = re.compile(r'^h([1-9]\d*)$')
_HEADER = ('Nodes', 'Connections', 'Triggers', 'Failures')
_CONNECTION_INTS = ('id', 'size', 'trigger', 'send_done_trigger',
                    'recv_done_trigger', 'prio')


class ConnectionMatrixError(ValueError):
    """A .cm file htsim would refuse, or one we cannot run."""


def node_host(node: int) -> str:
    """htsim node number -> our host name (0 -> h1)."""
    return 'h%d' % (node + 1)


def host_node(host: str) -> int:
    """Our host name -> htsim node number (h1 -> 0)."""
    match = _HOST.match(host)
    if not match:
        raise ConnectionMatrixError('%r is not a host name like h1' % host)
    return int(match.group(1)) - 1


# -- reading ------------------------------------------------------------------

def load_cm(path: str | Path) -> ConnectionMatrix:
    path = Path(path)
    try:
        # newline='': a CR stays in the text, as it does for htsim's getline
        with open(path, newline='') as f:
            text = f.read()
    except OSError as err:
        raise ConnectionMatrixError('%s: cannot read: %s'
                                    % (path, err.strerror)) from None
    try:
        return parse_cm(text)
    except ConnectionMatrixError as err:
        raise ConnectionMatrixError('%s: %s' % (path, err)) from None


def parse_cm(text: str) -> ConnectionMatrix:
    """Parse with htsim's rules; every refusal names the line."""
    header: dict[str, int] = {}
    connections: list[CmConnection] = []
    triggers: list[CmTrigger] = []
    failures: list[str] = []
    in_body = False
    for number, line in enumerate(text.split('\n'), start=1):
        try:
            if not in_body and line.startswith('#'):
                continue           # htsim skips header comments unread
            tokens = htsim_tokens(line)
            if not tokens:
                continue
            if tokens[0] in _HEADER and not in_body:
                header[tokens[0]] = _header_value(tokens)
            elif '->' in tokens[0]:
                in_body = True
                connections.append(_connection(tokens))
            elif tokens[0] == 'trigger':
                in_body = True
                triggers.append(_trigger(tokens))
            elif tokens[0] == 'failure':
                in_body = True
                failures.append(_failure(tokens))
            else:
                raise ConnectionMatrixError(
                    'unexpected %r (headers and # comments must come before '
                    'the first connection)' % tokens[0])
        except ConnectionMatrixError as err:
            raise ConnectionMatrixError('line %d: %s' % (number, err)) from None
    matrix = ConnectionMatrix(header.get('Nodes', 0), tuple(connections),
                              _merge_triggers(triggers), tuple(failures))
    _check_counts(header, matrix, len(triggers))
    _check_references(matrix)
    return matrix


def htsim_tokens(line: str) -> list[str]:
    """The line's tokens as htsim's tokenizer cuts them (split at every
    single space; the one empty piece after a trailing space is dropped),
    refusing what would reach htsim as an empty or glued token."""
    for char, name in (('\r', 'a carriage return (CRLF line end?)'),
                       ('\t', 'a tab')):
        if char in line:
            raise ConnectionMatrixError(
                '%s: htsim separates tokens by single spaces only' % name)
    tokens = line.split(' ')
    if tokens[-1] == '':
        tokens.pop()
    if '' in tokens:
        raise ConnectionMatrixError(
            'a leading space or two spaces in a row: htsim reads an empty '
            'token there and refuses it')
    return tokens


def _header_value(tokens: list[str]) -> int:
    if len(tokens) != 2:
        raise ConnectionMatrixError('%s needs one whole number' % tokens[0])
    return _whole(tokens[0], tokens[1])


def _whole(key: str, text: str) -> int:
    """A whole number as htsim's stoi reads it into a C int."""
    if not text.isdigit() or not text.isascii():
        raise ConnectionMatrixError('%s %r is not a whole number'
                                    % (key, text))
    value = int(text)
    if value > C_INT_MAX:
        raise ConnectionMatrixError(
            '%s %d is above 2^31-1: htsim reads it into a C int and aborts'
            % (key, value))
    return value


def _connection(tokens: list[str]) -> CmConnection:
    match = _ENDPOINTS.match(tokens[0])
    if not match:
        raise ConnectionMatrixError('%r is not <src>-><dst>' % tokens[0])
    values: dict[str, object] = {'src': _whole('src', match.group(1)),
                                 'dst': _whole('dst', match.group(2))}
    rest = tokens[1:]
    while rest:
        key = rest.pop(0)
        if key == 'addon':
            values['addon'] = True
        elif key == 'msg':
            values['msg'] = _msg(rest)
        elif key in _CONNECTION_INTS or key == 'start':
            if not rest:
                raise ConnectionMatrixError('%s needs a value' % key)
            if key == 'trigger' and not values.get('id'):
                raise ConnectionMatrixError(
                    'a triggered flow needs an id, before its trigger')
            text = rest.pop(0)
            if key == 'start':
                values['start_us'] = _start(text)
            else:
                values[key] = _whole(key, text)
        else:
            raise ConnectionMatrixError('unknown token %r' % key)
    return _checked_connection(values)


def _msg(rest: list[str]) -> int:
    """uet-htsim's msg: the next token is its id if it reads as one, else
    it stands alone (0 here); a bare msg must not end the line."""
    if not rest:
        raise ConnectionMatrixError(
            'a bare msg at the end of the line: htsim reads the token after '
            'it; put msg before another token')
    if not rest[0].isdigit():
        return 0
    msg = _whole('msg', rest.pop(0))
    if msg == 0:
        raise ConnectionMatrixError('msg id 0 is not allowed (uet-htsim); a '
                                    'message without id is a bare msg')
    return msg


def _start(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConnectionMatrixError('start %r is not a number' % text) \
            from None
    if not math.isfinite(value) or value < 0:
        raise ConnectionMatrixError('start must be a number >= 0, got %r'
                                    % text)
    return value


def _checked_connection(values: dict) -> CmConnection:
    if not values.get('size'):
        raise ConnectionMatrixError('a connection needs a positive size')
    if values.get('id') == 0:
        raise ConnectionMatrixError('flow id 0 is not allowed')
    triggered = bool(values.get('trigger'))
    if triggered and 'start_us' in values:
        raise ConnectionMatrixError('both start and trigger given')
    if not triggered and 'start_us' not in values:
        raise ConnectionMatrixError('no start and no trigger')
    return CmConnection(**values)


def _trigger(tokens: list[str]) -> CmTrigger:
    rest, trigger_id, kind, count = tokens[1:], 0, '', 0
    while rest:
        key = rest.pop(0)
        if key in TRIGGER_KINDS:
            if kind:
                raise ConnectionMatrixError('trigger has two kinds')
            kind = key
        elif key in ('id', 'count'):
            if not rest:
                raise ConnectionMatrixError('%s needs a value' % key)
            value = _whole(key, rest.pop(0))
            trigger_id, count = (value, count) if key == 'id' \
                else (trigger_id, value)
        else:
            raise ConnectionMatrixError('unknown trigger token %r' % key)
    if not trigger_id:
        raise ConnectionMatrixError('trigger with no (or zero) id')
    if not kind:
        raise ConnectionMatrixError('trigger %d has no kind (one of %s)'
                                    % (trigger_id, ', '.join(TRIGGER_KINDS)))
    if kind == 'barrier' and count < 1:
        raise ConnectionMatrixError('barrier %d needs count >= 1' % trigger_id)
    return CmTrigger(trigger_id, kind, count)


def _failure(tokens: list[str]) -> str:
    """Checked as htsim reads it, kept verbatim."""
    rest = tokens[1:]
    while rest:
        key = rest.pop(0)
        if key not in ('switch_type', 'switch_id', 'link_id'):
            raise ConnectionMatrixError('unknown failure attribute %r' % key)
        if not rest:
            raise ConnectionMatrixError('%s needs a value' % key)
        value = rest.pop(0)
        if key == 'switch_type' and value not in FAILURE_SWITCH_TYPES:
            raise ConnectionMatrixError('switch_type %r is not one of %s' % (
                value, ', '.join(FAILURE_SWITCH_TYPES)))
        if key != 'switch_type':
            _whole(key, value)
    return ' '.join(tokens)


def _merge_triggers(triggers: list[CmTrigger]) -> tuple[CmTrigger, ...]:
    seen: dict[int, CmTrigger] = {}
    for trigger in triggers:
        if trigger.id in seen:
            raise ConnectionMatrixError('trigger %d defined twice' % trigger.id)
        seen[trigger.id] = trigger
    return tuple(triggers)


def _check_counts(header: dict[str, int], matrix: ConnectionMatrix,
                  trigger_lines: int) -> None:
    if matrix.nodes < 1:
        raise ConnectionMatrixError('missing or zero "Nodes" header')
    for name, actual in (('Connections', len(matrix.connections)),
                         ('Triggers', trigger_lines),
                         ('Failures', len(matrix.failures))):
        if header.get(name, 0) != actual:
            raise ConnectionMatrixError('"%s %d" but %d found' % (
                name, header.get(name, 0), actual))


def _check_references(matrix: ConnectionMatrix) -> None:
    defined = {t.id for t in matrix.triggers}
    for i, conn in enumerate(matrix.connections, start=1):
        for node in (conn.src, conn.dst):
            if node >= matrix.nodes:
                raise ConnectionMatrixError(
                    'connection %d: node %d but "Nodes %d"'
                    % (i, node, matrix.nodes))
        for used in (conn.trigger, conn.send_done_trigger,
                     conn.recv_done_trigger):
            if used and used not in defined:
                raise ConnectionMatrixError(
                    'connection %d: trigger %d is referenced but not defined'
                    % (i, used))


# -- writing ------------------------------------------------------------------

def write_cm(matrix: ConnectionMatrix) -> str:
    lines = ['Nodes %d' % matrix.nodes,
             'Connections %d' % len(matrix.connections)]
    if matrix.triggers:
        lines.append('Triggers %d' % len(matrix.triggers))
    if matrix.failures:
        lines.append('Failures %d' % len(matrix.failures))
    lines += [_connection_line(c) for c in matrix.connections]
    lines += [_trigger_line(t) for t in matrix.triggers]
    lines += list(matrix.failures)
    return '\n'.join(lines) + '\n'


def save_cm(matrix: ConnectionMatrix, path: str | Path) -> None:
    Path(path).write_text(write_cm(matrix))


def _connection_line(conn: CmConnection) -> str:
    _check_writable(conn)
    parts = ['%d->%d' % (conn.src, conn.dst)]
    if conn.id:
        parts.append('id %d' % conn.id)
    if conn.msg is not None:
        # Never last on the line (htsim would read past it when bare):
        # size always follows, and a bare msg lets htsim's stoi fail on it.
        parts.append('msg %d' % conn.msg if conn.msg else 'msg')
    if conn.start_us is not None:
        parts.append('start %s' % _number(conn.start_us))
    if conn.trigger:
        parts.append('trigger %d' % conn.trigger)
    parts.append('size %d' % conn.size)
    for key in ('send_done_trigger', 'recv_done_trigger', 'prio'):
        value = getattr(conn, key)
        if value is not None and (value or key == 'prio'):
            parts.append('%s %d' % (key, value))
    if conn.addon:
        parts.append('addon')
    return ' '.join(parts)


def _check_writable(conn: CmConnection) -> None:
    """Refuse what htsim would misread or abort on, naming the flow."""
    flow = 'flow %s (%d->%d)' % (conn.id or '?', conn.src, conn.dst)
    if conn.size <= 0:
        raise ConnectionMatrixError('%s: size must be positive' % flow)
    if conn.size > C_INT_MAX:
        raise ConnectionMatrixError(
            '%s: size %d bytes is above htsim\'s limit of 2^31-1 (it reads '
            'sizes into a C int and aborts): split it into smaller flows'
            % (flow, conn.size))
    for key in ('src', 'dst', 'id', 'trigger', 'send_done_trigger',
                'recv_done_trigger', 'prio', 'msg'):
        value = getattr(conn, key)
        if value is not None and not 0 <= value <= C_INT_MAX:
            raise ConnectionMatrixError('%s: %s %d is outside htsim\'s '
                                        '0..2^31-1' % (flow, key, value))


def _trigger_line(trigger: CmTrigger) -> str:
    line = 'trigger id %d %s' % (trigger.id, trigger.kind)
    return line + (' count %d' % trigger.count if trigger.count else '')


def _number(value: float) -> str:
    return '%d' % value if float(value).is_integer() else repr(float(value))


# -- conversions --------------------------------------------------------------

def workload_to_matrix(workload: Workload,
                       nodes: int | None = None) -> ConnectionMatrix:
    """Our phases as htsim triggers: phase 0 flows start at their `start_s`;
    every flow of phase k (k >= 1) waits on barrier k, which fires when all
    flows of phase k-1 have been received (their recv_done_trigger)."""
    flows = workload.flows
    _check_exportable(workload)
    used = max((host_node(h) for f in flows for h in (f.src, f.dst)),
               default=0) + 1
    if nodes is not None and nodes < used:
        raise ConnectionMatrixError('workload uses node %d but nodes=%d'
                                    % (used - 1, nodes))
    last = len(workload.phases) - 1
    connections = tuple(
        CmConnection(host_node(f.src), host_node(f.dst), f.size_bytes, f.id,
                     start_us=round(f.start_s * US_PER_S) if k == 0 else None,
                     trigger=k,
                     recv_done_trigger=k + 1 if k < last else 0)
        for k, phase in enumerate(workload.phases) for f in phase)
    triggers = tuple(CmTrigger(k + 1, 'barrier', len(phase))
                     for k, phase in enumerate(workload.phases[:-1]))
    return ConnectionMatrix(nodes or used, connections, triggers)


def _check_exportable(workload: Workload) -> None:
    ids = [f.id for f in workload.flows]
    if any(i <= 0 for i in ids) or len(set(ids)) != len(ids):
        raise ConnectionMatrixError('htsim needs unique non-zero flow ids')
    for k, phase in enumerate(workload.phases):
        if not phase:
            raise ConnectionMatrixError('phase %d is empty' % k)
        if k and any(f.start_s for f in phase):
            # a triggered htsim flow cannot also carry a start time
            raise ConnectionMatrixError(
                'phase %d has flows with a start offset: htsim starts '
                'triggered flows when the trigger fires' % k)


def matrix_to_workload(matrix: ConnectionMatrix,
                       label: str = 'cm') -> Workload:
    """Flows with a start time form phase 0 (each at its `start_s`); a
    triggered flow goes one phase after the latest flow that signals its
    trigger. That is exact for the barrier form `workload_to_matrix` writes;
    for per-flow chains (oneshot triggers) every phase waits for the whole
    previous phase, a stricter synchronisation than htsim's."""
    depth = _phase_of_each(matrix)
    ids = _flow_ids(matrix)
    phases: list[list[Flow]] = [[] for _ in range(max(depth, default=-1) + 1)]
    for conn, k, flow_id in zip(matrix.connections, depth, ids):
        if conn.src == conn.dst:
            raise ConnectionMatrixError('flow %d sends from node %d to itself'
                                        % (flow_id, conn.src))
        start = (conn.start_us or 0) / US_PER_S
        phases[k].append(Flow(flow_id, node_host(conn.src),
                              node_host(conn.dst), conn.size, label, start))
    if any(not p for p in phases):
        raise ConnectionMatrixError('trigger chain skips a phase')
    return Workload('connection_matrix', tuple(tuple(p) for p in phases),
                    (range(len(phases)),) if phases else ())


def _phase_of_each(matrix: ConnectionMatrix) -> list[int]:
    """Phase of every connection, in file order (iterative: a long chain of
    triggers must not hit Python's recursion limit)."""
    conns = matrix.connections
    signalled_by = _signallers(matrix)
    depth: list[int | None] = [None if c.trigger else 0 for c in conns]
    progress = True
    while progress and None in depth:
        progress = False
        for i, conn in enumerate(conns):
            if depth[i] is not None:
                continue
            parents = [depth[p] for p in signalled_by[conn.trigger]]
            if None not in parents:
                depth[i] = 1 + max(parents)     # type: ignore[type-var]
                progress = True
    if None in depth:
        stuck = conns[depth.index(None)].trigger
        raise ConnectionMatrixError('trigger %d waits, through its chain, on '
                                    'itself' % stuck)
    return depth  # type: ignore[return-value]


def _signallers(matrix: ConnectionMatrix) -> dict[int, list[int]]:
    """trigger id -> indexes of the connections that signal it; refuses a
    trigger nobody signals and a barrier whose count htsim would never (or
    too early) reach."""
    signalled_by: dict[int, list[int]] = {t.id: [] for t in matrix.triggers}
    for i, conn in enumerate(matrix.connections):
        for fired in {conn.send_done_trigger, conn.recv_done_trigger} - {0}:
            signalled_by[fired].append(i)
    for trigger in matrix.triggers:
        count = len(signalled_by[trigger.id])
        waited_on = any(c.trigger == trigger.id for c in matrix.connections)
        if waited_on and not count:
            raise ConnectionMatrixError(
                'trigger %d is never signalled: its flows would never start'
                % trigger.id)
        if trigger.kind == 'barrier' and waited_on and trigger.count != count:
            raise ConnectionMatrixError(
                'barrier %d has count %d but %d flows signal it'
                % (trigger.id, trigger.count, count))
    return signalled_by


def _flow_ids(matrix: ConnectionMatrix) -> list[int]:
    """The file's ids when every flow has a distinct one, else 1..C."""
    ids = [c.id for c in matrix.connections]
    if all(ids) and len(set(ids)) == len(ids):
        return ids
    return list(range(1, len(ids) + 1))

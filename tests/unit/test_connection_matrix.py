"""htsim connection matrices: the real format, round trips, refusals."""
from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.fabric.topo_spec import parse_topo_spec
from testbed.fabric.usid_plan import FabricPlan
from testbed.workload.connection_matrix import (
    CmConnection, CmTrigger, ConnectionMatrix, ConnectionMatrixError,
    host_node, htsim_tokens, load_cm, matrix_to_workload, node_host, parse_cm, save_cm,
    workload_to_matrix, write_cm)
from testbed.workload.model import Victim, WorkloadSpec
from testbed.workload.model import Flow, Workload
from testbed.workload.workloads import build_workload

ROOT = Path(__file__).resolve().parents[2]

# As in csg-htsim's sim/datacenter/connection_matrices/incast.cm (no ids).
HTSIM_INCAST = '''Nodes 16
Connections 3
0->15 start 0 size 2000000
1->15 start 0 size 2000000
2->15 start 0 size 2000000'''

# As gen_allreduce.py writes them: per-flow chains of oneshot triggers.
HTSIM_ALLREDUCE = '''Nodes 4
Connections 6
Triggers 4
0->1 id 1 start 0 size 1000 send_done_trigger 1
1->0 id 2 trigger 1 size 1000 send_done_trigger 2
0->1 id 3 trigger 2 size 1000
1->0 id 4 start 0 size 1000 send_done_trigger 3
0->1 id 5 trigger 3 size 1000 send_done_trigger 4
1->0 id 6 trigger 4 size 1000
trigger id 1 oneshot
trigger id 2 oneshot
trigger id 3 oneshot
trigger id 4 oneshot
'''


@lru_cache(maxsize=None)
def fattree() -> FabricPlan:
    return FabricPlan.from_topo(parse_topo_spec('fattree,k=4,planes=2')
                                .build())


def without_labels(workload: Workload):
    return [[(f.id, f.src, f.dst, f.size_bytes, f.start_s) for f in phase]
            for phase in workload.phases]


# -- the format ------------------------------------------------------------------

def test_node_numbers_map_to_host_names():
    assert node_host(0) == 'h1' and node_host(15) == 'h16'
    assert host_node('h1') == 0 and host_node('h16') == 15
    for bad in ('x1', 'h0', 'h', 'p1c0'):
        with pytest.raises(ConnectionMatrixError):
            host_node(bad)


def test_parses_htsim_incast_without_ids():
    matrix = parse_cm(HTSIM_INCAST)
    assert matrix.nodes == 16
    assert matrix.connections[0] == CmConnection(0, 15, 2_000_000,
                                                 start_us=0.0)
    workload = matrix_to_workload(matrix)
    assert [(f.id, f.src, f.dst) for f in workload.flows] == [
        (1, 'h1', 'h16'), (2, 'h2', 'h16'), (3, 'h3', 'h16')]
    assert len(workload.phases) == 1


def test_parses_htsim_allreduce_trigger_chains_into_phases():
    matrix = parse_cm(HTSIM_ALLREDUCE)
    assert matrix.triggers[0] == CmTrigger(1, 'oneshot')
    workload = matrix_to_workload(matrix)
    assert [[f.id for f in phase] for phase in workload.phases] == [
        [1, 4], [2, 5], [3, 6]]


def test_parses_every_token_htsim_knows():
    text = ('# a header comment\nNodes 4\nConnections 1\nTriggers 1\n\n'
            '0->3 id 7 start 12.5 size 100 prio 3 msg 2 addon '
            'send_done_trigger 1\n'
            'trigger id 1 multishot\n')
    conn = parse_cm(text).connections[0]
    assert conn == CmConnection(0, 3, 100, 7, 12.5, prio=3, msg=2,
                                addon=True, send_done_trigger=1)
    assert parse_cm(write_cm(parse_cm(text))) == parse_cm(text)


def test_start_is_in_microseconds():
    matrix = parse_cm('Nodes 2\nConnections 1\n0->1 id 1 start 250000 '
                      'size 10\n')
    assert matrix_to_workload(matrix).flows[0].start_s == 0.25


def test_shipped_example_matrix():
    matrix = load_cm(ROOT / 'scenarios/matrices/nic_port_failure.cm')
    workload = matrix_to_workload(matrix)
    assert [[(f.src, f.dst) for f in p] for p in workload.phases] == [
        [('h1', 'h16'), ('h16', 'h1'), ('h6', 'h11')],
        [('h1', 'h9'), ('h9', 'h1')]]
    assert workload.phases[0][2].start_s == 0.5
    # what we write is what the file says, comments aside
    body = [line for line in (ROOT / 'scenarios/matrices/nic_port_failure.cm')
            .read_text().splitlines() if not line.startswith('#')]
    assert write_cm(matrix).splitlines() == body


@pytest.mark.parametrize('text,words', [
    ('Connections 1\n0->1 id 1 start 0 size 5', 'Nodes'),
    ('Nodes 2\nConnections 2\n0->1 id 1 start 0 size 5', r'"Connections 2" but 1'),
    ('Nodes 2\nConnections 1\n0->1 id 1 start 0 trigger 1 size 5\n'
     'trigger id 1 oneshot', 'both start and trigger'),
    ('Nodes 2\nConnections 1\n0->1 id 1 size 5', 'no start and no trigger'),
    ('Nodes 2\nConnections 1\n0->1 id 1 start 0', 'positive size'),
    ('Nodes 2\nConnections 1\n0->1 id 0 start 0 size 5', 'flow id 0'),
    ('Nodes 2\nConnections 1\n0->1 start 0 size 5 colour red',
     "unknown token 'colour'"),
    ('Nodes 2\nConnections 1\n0->1 id 1 start 0 size 5\n# late comment',
     'before the first connection'),
    ('Nodes 2\nConnections 1\n0->2 id 1 start 0 size 5', 'node 2 but "Nodes 2"'),
    ('Nodes 2\nConnections 1\nTriggers 2\n0->1 id 1 start 0 size 5\n'
     'trigger id 1 oneshot', r'"Triggers 2" but 1'),
    ('Nodes 2\nConnections 1\nTriggers 1\n0->1 id 1 trigger 3 size 5\n'
     'trigger id 1 oneshot', 'trigger 3 is referenced but not defined'),
    ('Nodes 2\nConnections 1\nTriggers 1\n0->1 trigger 1 size 5\n'
     'trigger id 1 oneshot', 'triggered flow needs an id'),
    ('Nodes 2\nConnections 1\nTriggers 1\n0->1 id 1 start 0 size 5\n'
     'trigger id 1', 'no kind'),
    ('Nodes 2\nConnections 1\nTriggers 1\n0->1 id 1 start 0 size 5\n'
     'trigger id 1 barrier', 'count >= 1'),
    ('Nodes two\n', 'whole number'),
    ('Nodes 2\nConnections 1\n0 -> 1 start 0 size 5', "unexpected '0'"),
])
def test_refuses_what_htsim_refuses(text, words):
    with pytest.raises(ConnectionMatrixError, match=words):
        parse_cm(text)


def test_refusals_name_the_line():
    with pytest.raises(ConnectionMatrixError, match='line 3: '):
        parse_cm('Nodes 2\nConnections 1\n0->1 id 1 size 5\n')


@pytest.mark.parametrize('text,words', [
    ('Nodes 2\nConnections 2\nTriggers 1\n0->1 id 1 start 0 size 5 '
     'recv_done_trigger 1\n1->0 id 2 trigger 1 size 5\n'
     'trigger id 1 barrier count 2', 'barrier 1 has count 2 but 1'),
    ('Nodes 2\nConnections 1\nTriggers 1\n1->0 id 2 trigger 1 size 5\n'
     'trigger id 1 oneshot', 'never signalled'),
    ('Nodes 2\nConnections 2\nTriggers 2\n'
     '0->1 id 1 trigger 2 size 5 send_done_trigger 1\n'
     '1->0 id 2 trigger 1 size 5 send_done_trigger 2\n'
     'trigger id 1 oneshot\ntrigger id 2 oneshot', 'waits.*on itself'),
    ('Nodes 2\nConnections 1\n1->1 id 1 start 0 size 5', 'to itself'),
])
def test_refuses_matrices_we_cannot_run(text, words):
    with pytest.raises(ConnectionMatrixError, match=words):
        matrix_to_workload(parse_cm(text))


def test_load_names_the_file(tmp_path):
    path = tmp_path / 'bad.cm'
    path.write_text('Nodes 2\nConnections 3\n')
    with pytest.raises(ConnectionMatrixError, match='bad.cm: "Connections 3"'):
        load_cm(path)


# -- round trips -------------------------------------------------------------------

SPECS = [
    WorkloadSpec('point_to_point', src='h1', dst='h16', size_mb=1.5, count=3),
    WorkloadSpec('permutation', size_mb=2),
    WorkloadSpec('incast', size_mb=1, receiver='h1', fan_in=7,
                 victim=Victim('h3', 'h2', 1)),
    WorkloadSpec('ring_allreduce', size_mb=1.000001,
                 hosts=('h1', 'h5', 'h9', 'h13'), iterations=3),
    WorkloadSpec('all_to_all', size_mb=0.9, hosts=('h1', 'h6', 'h11', 'h16')),
]


@pytest.mark.parametrize('spec', SPECS, ids=lambda s: s.type)
def test_every_workload_round_trips_through_a_cm(spec, tmp_path):
    plan = fattree()
    workload = build_workload(spec, plan.hosts, plan, random.Random(5))
    matrix = workload_to_matrix(workload, nodes=16)
    save_cm(matrix, tmp_path / 'w.cm')
    again = load_cm(tmp_path / 'w.cm')
    assert again == matrix
    assert without_labels(matrix_to_workload(again)) == \
        without_labels(workload)


def test_export_uses_barriers_between_phases():
    spec = WorkloadSpec('ring_allreduce', size_mb=1, hosts=('h1', 'h5', 'h9'))
    workload = build_workload(spec, fattree().hosts, fattree())
    matrix = workload_to_matrix(workload, nodes=16)
    phases = len(workload.phases)
    assert matrix.triggers == tuple(CmTrigger(k, 'barrier', 3)
                                    for k in range(1, phases))
    first, last = matrix.connections[0], matrix.connections[-1]
    assert (first.start_us, first.trigger, first.recv_done_trigger) == \
        (0, 0, 1)
    assert (last.start_us, last.trigger, last.recv_done_trigger) == \
        (None, phases - 1, 0)
    text = write_cm(matrix)
    assert text.startswith('Nodes 16\nConnections %d\nTriggers %d\n0->4 id 1 '
                           'start 0 size 333334 recv_done_trigger 1\n'
                           % (3 * phases, phases - 1))


def test_start_offsets_round_trip():
    workload = Workload('custom', ((Flow(1, 'h1', 'h2', 10, '', 0.25),
                                    Flow(2, 'h3', 'h4', 10, '', 0.0)),
                                   (Flow(3, 'h2', 'h1', 5),)), (range(2),))
    back = matrix_to_workload(parse_cm(write_cm(workload_to_matrix(workload))))
    assert without_labels(back) == without_labels(workload)
    assert parse_cm(write_cm(workload_to_matrix(workload))).nodes == 4


def test_export_refuses_what_htsim_cannot_express():
    late = Workload('custom', ((Flow(1, 'h1', 'h2', 10),),
                               (Flow(2, 'h2', 'h1', 10, '', 0.5),)),
                    (range(2),))
    with pytest.raises(ConnectionMatrixError, match='start offset'):
        workload_to_matrix(late)
    twins = Workload('custom', ((Flow(1, 'h1', 'h2', 10),
                                 Flow(1, 'h2', 'h1', 10)),), (range(1),))
    with pytest.raises(ConnectionMatrixError, match='unique non-zero'):
        workload_to_matrix(twins)
    with pytest.raises(ConnectionMatrixError, match='nodes=2'):
        workload_to_matrix(Workload('custom', ((Flow(1, 'h1', 'h3', 10),),),
                                    (range(1),)), nodes=2)


def test_connection_matrix_workload_builds_from_its_spec():
    matrix = parse_cm(HTSIM_INCAST)
    spec = WorkloadSpec('connection_matrix', file='x.cm', matrix=matrix)
    workload = build_workload(spec, fattree().hosts, fattree())
    assert workload == matrix_to_workload(matrix)
    assert isinstance(matrix, ConnectionMatrix)


# -- htsim's lexical rules (its ConnectionMatrix::load, see the module doc) -------

HEAD = 'Nodes 4\nConnections 1\n'


@pytest.mark.parametrize('line,words', [
    ('0->1\tid 1 start 0 size 5', 'a tab'),
    ('0->1 id 1  start 0 size 5', 'two spaces in a row'),
    (' 0->1 id 1 start 0 size 5', 'leading space'),
    ('0->1 id 1 start 0 size 5  ', 'two spaces in a row'),
    ('0->1 id 1 start 0 size 5\r', 'carriage return'),
    ('0->1 id 1 start 0 size 2147483648', 'above 2\\^31-1'),
    ('0->1 id 1 start 0 size +5', "size '\\+5' is not a whole number"),
    ('0->1 id 1 start 0 size 5 msg 0', 'msg id 0'),
    ('0->1 id 1 start 0 size 5 msg', 'bare msg at the end'),
    ('0->1 trigger 1 id 1 size 5', 'needs an id, before its trigger'),
    ('0->1 id 1 start nan size 5', 'start must be a number >= 0'),
])
def test_refuses_what_htsim_lexer_refuses(line, words):
    with pytest.raises(ConnectionMatrixError, match='line 3: .*' + words):
        parse_cm(HEAD + line + '\n')


def test_refuses_header_lines_htsim_would_skip_unread():
    # htsim ignores an unknown header line, so "Nodes" below would be lost
    for header in ('\tNodes 4', ' Nodes 4', 'Nodes  4', 'Flows 4'):
        with pytest.raises(ConnectionMatrixError, match='line 1: '):
            parse_cm(header + '\nConnections 1\n0->1 start 0 size 5\n')


def test_takes_what_htsim_takes():
    # one trailing space, tabs inside a header comment, blank lines, a bare
    # msg followed by another token (htsim's stoi fails on it: no msg id)
    text = ('#\tcomment\n\nNodes 4\nConnections 2\n\n'
            '0->1 id 1 msg start 0 size 5 \n'
            '1->2 id 2 msg 9 start 0 size 2147483647\n')
    first, second = parse_cm(text).connections
    assert (first.msg, second.msg, second.size) == (0, 9, 2**31 - 1)


def test_refuses_failure_lines_htsim_refuses():
    base = 'Nodes 4\nConnections 1\nFailures 1\n0->1 start 0 size 5\n'
    ok = parse_cm(base + 'failure switch_type AGG switch_id 0 link_id 1\n')
    assert ok.failures == ('failure switch_type AGG switch_id 0 link_id 1',)
    for bad, words in (('failure switch_type SPINE', 'TOR, AGG, CORE'),
                       ('failure port 3', 'unknown failure attribute'),
                       ('failure switch_id', 'needs a value')):
        with pytest.raises(ConnectionMatrixError, match=words):
            parse_cm(base + bad + '\n')


def test_writer_writes_a_bare_msg_bare_and_never_last():
    matrix = ConnectionMatrix(4, (
        CmConnection(0, 1, 5, 1, 0.0, msg=0),
        CmConnection(1, 2, 5, 2, 0.0, msg=3, addon=True)))
    lines = write_cm(matrix).splitlines()
    assert lines[2:] == ['0->1 id 1 msg start 0 size 5',
                         '1->2 id 2 msg 3 start 0 size 5 addon']
    assert parse_cm(write_cm(matrix)) == matrix


@pytest.mark.parametrize('conn,words', [
    (CmConnection(0, 1, 2**31, 7, 0.0), r'flow 7 \(0->1\): size 2147483648 '
                                        r'bytes is above htsim.*split it'),
    (CmConnection(0, 1, 5, 2**31, 0.0), r'id 2147483648 is outside'),
    (CmConnection(0, 1, 0, 1, 0.0), 'size must be positive'),
])
def test_writer_refuses_what_htsim_cannot_take(conn, words):
    with pytest.raises(ConnectionMatrixError, match=words):
        write_cm(ConnectionMatrix(4, (conn,)))


def test_writer_refuses_a_workload_flow_above_htsims_size_limit():
    big = Workload('custom', ((Flow(1, 'h1', 'h2', 3_000_000_000),),),
                   (range(1),))
    with pytest.raises(ConnectionMatrixError, match='split it'):
        write_cm(workload_to_matrix(big))


@pytest.mark.parametrize('path', sorted((ROOT / 'scenarios/matrices')
                                        .glob('*.cm')), ids=lambda p: p.name)
def test_shipped_matrices_round_trip_under_htsims_rules(path):
    matrix = load_cm(path)
    text = write_cm(matrix)
    for line in text.splitlines():
        assert ' '.join(htsim_tokens(line)) == line   # single spaces only
    assert parse_cm(text) == matrix


_ids = st.integers(1, 2**31 - 1)
_connections = st.builds(
    CmConnection, src=st.integers(0, 15), dst=st.integers(0, 15),
    size=st.integers(1, 2**31 - 1), id=_ids,
    start_us=st.one_of(st.integers(0, 10**9).map(float),
                       st.floats(0, 1e9, allow_nan=False)),
    prio=st.one_of(st.none(), st.integers(0, 2**31 - 1)),
    msg=st.one_of(st.none(), st.integers(0, 2**31 - 1)),
    addon=st.booleans())


@settings(max_examples=200, deadline=None)
@given(st.lists(_connections, min_size=1, max_size=5))
def test_any_writable_matrix_reads_back_equal(connections):
    matrix = ConnectionMatrix(16, tuple(connections))
    text = write_cm(matrix)
    for line in text.splitlines():
        tokens = htsim_tokens(line)
        assert tokens[-1] != 'msg'
        assert all(int(t) <= 2**31 - 1 for t in tokens if t.isdigit())
    assert parse_cm(text) == matrix

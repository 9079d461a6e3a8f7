"""MRC agents as separate processes inside the hosts, driven by JSON lines."""
import pytest

from testbed.nic.emulated_timescale import emulated_qp_profile, qp_reach
from testbed.shell.agent_client import AgentError, start_agent

SRC, DST = 'h1', 'h16'


def paths(plan, a, b):
    return {str(p): [x.carrier for x in plan.paths(a, b, p)]
            for p in plan.planes}


def test_agents_write_across_the_fabric(fabric_factory):
    fab = fabric_factory('fattree,k=4,planes=2')
    a, b = start_agent(fab, SRC), start_agent(fab, DST, seed=1)
    fab.add_cleanup(a.stop)
    fab.add_cleanup(b.stop)
    size = 8 << 20
    mr = b.call(cmd='register_mr', size=size)
    # The caller computes the profile once (NSCC sized on 2 planes x 10 Mbit/s)
    # and it travels whole; connect brings each QP up with its create_qp profile.
    profile = emulated_qp_profile(*qp_reach(
        'mrc', 10e6, len(fab.plan.planes), fab.plan.longest_path_links)).to_json()
    qa = a.call(cmd='create_qp', transport='mrc', profile=profile)
    qb = b.call(cmd='create_qp', transport='mrc', profile=profile)
    a.call(cmd='connect', qpn=qa['qpn'], remote=qb['info'],
           paths_by_plane=paths(fab.plan, SRC, DST))
    b.call(cmd='connect', qpn=qb['qpn'], remote=qa['info'],
           paths_by_plane=paths(fab.plan, DST, SRC))
    b.call(cmd='post_recv', qpn=qb['qpn'], wr_id=9)
    posted = a.call(cmd='post_write', qpn=qa['qpn'], size=size,
                    rkey=mr['rkey'], imm=77, wr_id=1, seed=42)
    done_a = a.wait_for(lambda e: e['event'] == 'completion', timeout_s=120)
    done_b = b.wait_for(lambda e: e['event'] == 'completion', timeout_s=30)
    assert done_a['ok'] and done_a['wr_id'] == 1
    assert done_b['ok'] and done_b['imm'] == 77 and done_b['byte_len'] == size
    got = b.call(cmd='hash_mr', rkey=mr['rkey'], length=size)
    assert got['sha256'] == posted['sha256']
    stats = a.call(cmd='stats')
    qp_stats = stats['endpoint']['qps']['%#x' % qa['qpn']]
    assert qp_stats['bytes_sent'] >= size
    assert qp_stats['cc']['cwnd'] is not None    # NSCC came with the profile (no CC: null)
    evs = a.call(cmd='evs', qpn=qa['qpn'])['evs']
    assert {e['plane'] for e in evs} == {1, 2}


def test_a_bad_command_is_refused_and_the_agent_lives_on(fabric_factory):
    fab = fabric_factory('leafspine,leaves=2,spines=1,hosts=1,planes=1')
    agent = start_agent(fab, 'h1')
    fab.add_cleanup(agent.stop)
    for bad in ({'cmd': 'fly'}, {'cmd': 'post_write', 'qpn': 99, 'size': 1,
                                 'rkey': 1}, {'cmd': 'hash_mr', 'rkey': 5},
                {'cmd': 'create_qp', 'link_rate_bps': 1e6},
                {'cmd': 'create_qp', 'profile': {'mpr': 0}}):
        with pytest.raises(AgentError):
            agent.call(**bad)
    agent.send(cmd='not json')   # still valid JSON, unknown command
    with pytest.raises(AgentError, match='unknown command'):
        agent.wait_for(lambda e: False, timeout_s=5)
    agent.proc.stdin.write('{broken\n')
    agent.proc.stdin.flush()
    with pytest.raises(AgentError, match='JSONDecodeError'):
        agent.wait_for(lambda e: False, timeout_s=5)
    assert agent.call(cmd='stats')['event'] == 'stats'

"""testbed.fabric.baseline: what counts as a fabric left other than built."""
from testbed.fabric.baseline import FabricState

BUILT = FabricState(
    tables={'p1l0': 'priority=100,ipv6 actions=output:1\ngroup_id=4096,bucket=output:2',
            'p1s0': 'priority=100,ipv6 actions=output:3'},
    interfaces={'p1l0-eth1': 'up/up', 'p1s0-eth1': 'up/up'},
    filters={'p1l0-eth1 egress': 1, 'p1l0-eth1 ingress': 0},
    nft_tables=())


def changed(**fields) -> list[str]:
    now = FabricState(**{**BUILT.__dict__, **fields})
    return BUILT.differences(now)


def test_the_same_state_differs_in_nothing():
    assert BUILT.differences(FabricState(**BUILT.__dict__)) == []


def test_a_group_the_controller_has_not_restored_yet_is_a_table_change():
    tables = dict(BUILT.tables, p1l0='priority=100,ipv6 actions=output:1\n'
                                     'group_id=4096,bucket=output:3')
    assert changed(tables=tables) == ['tables changed: p1l0']


def test_a_link_left_down_a_filter_left_behind_and_a_table_are_each_named():
    found = changed(interfaces=dict(BUILT.interfaces, **{'p1s0-eth1': 'down/down'}),
                    filters=dict(BUILT.filters, **{'p1l0-eth1 ingress': 1}),
                    nft_tables=(('netdev', 'mrc_gray_h1_p1l0'),))
    assert found == ['interfaces changed: p1s0-eth1',
                     'filters changed: p1l0-eth1 ingress',
                     "nftables tables: (('netdev', 'mrc_gray_h1_p1l0'),), were ()"]


def test_a_bridge_gone_or_new_is_a_change_and_long_lists_are_cut():
    tables = {'p9c%d' % i: '' for i in range(10)}     # 10 new, both built ones gone
    found = changed(tables=tables)
    assert len(found) == 1 and found[0].endswith('and 4 more'), found

"""Gray failure: a link that stays up and silently loses a share of its
frames.

The loss is a tc filter on the clsact egress hook of each end of the link
(a host end inside the host's namespace): a few instructions of classic BPF
draw a random number and *steal* the chosen share of frames. Egress,
because OVS reads switch ports with AF_PACKET, which sees a frame before
any ingress hook could drop it; stolen, not dropped, because a drop is
reported to the sender as ENOBUFS, and OVS's userspace datapath then
discards the rest of the batch it was sending, turning 50% into 90% under
bursts. nftables (netdev egress, ``numgen random``) drops that way; it
remains available as ``method='nft'``, in tables named ``mrc_gray_*``.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from functools import cache

from testbed.fabric.faults.base import (FabricLink, FaultError,
                                        FaultUnavailable, LinkEnd, Runner,
                                        _alive, _by_namespace, _clock,
                                        _exists, _try)

GRAY_TABLE_PREFIX = 'mrc_gray_'    # clean.py removes every mrc_* table
NFT_NAME_MAX = 31                  # kernels before 4.13 allowed 32 with NUL
NFT_SAFE_NAME = re.compile(r'^[A-Za-z0-9_]+$')
NFT_LOSS_SCALE = 10000             # numgen modulus: 0.01% loss resolution
GRAY_METHODS = ('tc', 'nft')
TC_GRAY_PREF = '49'                # our filter's place on clsact egress
# Classic BPF, as tc's `bytecode` takes it: opcodes and the ancillary
# offset of a random u32 (linux/filter.h), and tc verdicts (pkt_cls.h).
BPF_LD_W_ABS, BPF_JGE_K, BPF_RET_K = 0x20, 0x35, 0x06
SKF_AD_RANDOM = (-0x1000 + 56) & 0xFFFFFFFF
TC_ACT_UNSPEC, TC_ACT_STOLEN = 0xFFFFFFFF, 4
# What nft says when the kernel has no netdev egress hook (Linux < 5.16),
# or nft itself predates it (< 1.0.1).
NFT_UNSUPPORTED = ('Operation not supported', 'unknown chain hook',
                   "syntax error, unexpected egress")


@dataclass
class GrayLoss:
    link: FabricLink
    method: str                   # 'tc' or 'nft'
    loss_pct: float
    # tc: interface -> whether we added its clsact qdisc (else it was there)
    tc_filters: dict[str, bool] = field(default_factory=dict)
    # nft: the namespaces (host pid, None for root) holding the link's table
    nft_tables: set[int | None] = field(default_factory=set)

    @property
    def table(self) -> str:
        return gray_table_name(self.link)


class GrayFaults:
    """The gray-loss faults of `FaultInjector` (a mixin)."""

    def gray_failure(self, a: str, b: str, loss_pct: float,
                     method: str = 'tc') -> dict:
        """Drop `loss_pct` % of the frames in each direction of the link,
        at random, replacing any gray loss already on it. `method` 'tc'
        (the default) drops silently; 'nft' is the first, nftables
        implementation, which makes OVS discard the rest of each batch
        (docs/faults.md)."""
        link = self._link(a, b)
        loss_pct = _check_loss(loss_pct)
        if method not in GRAY_METHODS:
            raise FaultError('gray_failure: method must be one of %s, got %r'
                             % (', '.join(GRAY_METHODS), method))
        self._require_gray(method)
        t = _clock()
        old = self._gray.get(link.key)
        if old is not None and old.method != method:
            self._clear_gray(self._gray.pop(link.key))
        gray = self._gray.setdefault(link.key, GrayLoss(link, method, loss_pct))
        gray.loss_pct = loss_pct
        try:
            self._gray_on(gray)
        except FaultError:
            del self._gray[link.key]     # half a gray link is no fault to keep
            _try(lambda: self._clear_gray(gray), 'roll back', [])
            raise
        return self._event('gray_failure', {
            'a': a, 'b': b, 'loss_pct': loss_pct, 'method': method}, t,
            _gray_detail(gray))

    def gray_clear(self, a: str, b: str) -> dict:
        link = self._link(a, b)
        t = _clock()
        gray = self._gray.pop(link.key, None)
        dropped = self._clear_gray(gray) if gray else {}
        detail = ('%s gray loss removed from %s' % (gray.method, ', '.join(
            e.where() for e in link.ends)) if gray else
            'no gray loss on this link')
        return self._event('gray_clear', {'a': a, 'b': b, 'dropped': dropped},
                           t, detail)

    def _gray_on(self, gray: GrayLoss) -> None:
        queues = [end.queue_end() for end in gray.link.ends]
        if gray.method == 'tc':
            for end in queues:
                if end.intf not in gray.tc_filters:
                    gray.tc_filters[end.intf] = _tc_add_clsact(self._run, end)
                _tc_set_filter(self._run, end, gray.loss_pct)
            return
        for pid, ends in _by_namespace(queues).items():
            self._nft(pid, _nft_ruleset(gray.table, ends, gray.loss_pct))
            gray.nft_tables.add(pid)

    def _clear_gray(self, gray: GrayLoss) -> dict[str, int]:
        """Remove the loss; returns the frames each end dropped where the
        method counts them (nft does, tc does not)."""
        dropped: dict[str, int] = {}
        queues = [end.queue_end() for end in gray.link.ends]
        for end in queues:
            if end.intf in gray.tc_filters and _exists(end):
                _tc_gray_off(self._run, end, gray.tc_filters[end.intf])
        for pid, ends in _by_namespace(queues).items():
            if pid not in gray.nft_tables or (pid is not None
                                              and not _alive(pid)):
                continue        # never made, or gone with its namespace
            dropped.update(_nft_gray_off(self._run, pid, gray.table, ends))
        return dropped

    def _require_gray(self, method: str) -> None:
        if method == 'nft':
            self._require('nft', 'gray_failure', 'no nftables random loss')
            return
        self._require('tc', 'gray_failure', 'no random-loss injection')
        if not tc_random_drop_available():
            raise FaultUnavailable(
                'gray_failure', 'tc clsact egress with a classic-BPF filter '
                '(CONFIG_NET_SCH_INGRESS, CONFIG_NET_CLS_BPF)',
                "no silent random loss; method='nft' works without it but "
                'OVS then loses more than asked under bursts')

    def _nft(self, pid: int | None, script: str) -> str:
        try:
            return self._run(pid, ['nft', '-f', '-'], script)
        except FaultError as err:
            if any(sign in str(err) for sign in NFT_UNSUPPORTED):
                raise FaultUnavailable('gray_failure', 'the nftables netdev '
                                       'egress hook (Linux >= 5.16)',
                                       str(err)) from None
            raise


def gray_table_name(link: FabricLink) -> str:
    """mrc_gray_<a>_<b>, or a digest where node names would make it too
    long or not a plain nft identifier."""
    a, b = sorted(link.key)
    name = '%s%s_%s' % (GRAY_TABLE_PREFIX, a, b)
    if len(name) <= NFT_NAME_MAX and NFT_SAFE_NAME.match(name):
        return name
    digest = hashlib.sha1(('%s|%s' % (a, b)).encode()).hexdigest()
    return GRAY_TABLE_PREFIX + digest[:NFT_NAME_MAX - len(GRAY_TABLE_PREFIX)]


def _nft_ruleset(table: str, ends: list[LinkEnd], loss_pct: float) -> str:
    """One transaction: drop the table if present, then define it with an
    egress chain per interface (counting what it drops)."""
    threshold = round(loss_pct * NFT_LOSS_SCALE / 100)
    chains = ''.join(
        '  chain egress%d {\n'
        '    type filter hook egress device "%s" priority 0; policy accept;\n'
        '    numgen random mod %d < %d counter drop\n'
        '  }\n' % (i, end.intf, NFT_LOSS_SCALE, threshold)
        for i, end in enumerate(ends))
    return ('add table netdev {t}\ndelete table netdev {t}\n'
            'table netdev {t} {{\n{c}}}\n'.format(t=table, c=chains))


def _nft_gray_off(run: Runner, pid: int | None, table: str,
                  ends: list[LinkEnd]) -> dict[str, int]:
    listing = run(pid, ['nft', 'list', 'table', 'netdev', table], None)
    run(pid, ['nft', 'delete', 'table', 'netdev', table], None)
    return dict(zip((e.intf for e in ends), _counter_packets(listing)))


def random_drop_bytecode(loss_pct: float) -> str:
    """A classic-BPF tc filter, in tc's `bytecode` notation, that steals
    (drops without telling the sender) a loss_pct share of packets:
    A = random u32; if A >= threshold: pass; else: TC_ACT_STOLEN."""
    threshold = round(loss_pct / 100 * 2 ** 32)
    if threshold >= 2 ** 32:
        return '1,6 0 0 %d' % TC_ACT_STOLEN
    program = [(BPF_LD_W_ABS, 0, 0, SKF_AD_RANDOM),
               (BPF_JGE_K, 0, 1, threshold),
               (BPF_RET_K, 0, 0, TC_ACT_UNSPEC),
               (BPF_RET_K, 0, 0, TC_ACT_STOLEN)]
    return '%d,%s' % (len(program), ','.join(
        '%d %d %d %d' % insn for insn in program))


def _tc_add_clsact(run: Runner, end: LinkEnd) -> bool:
    """Give the interface a clsact qdisc; False if it had one already."""
    dev = ['dev', end.intf]
    if 'qdisc clsact ' in run(end.pid, ['tc', 'qdisc', 'show', *dev], None):
        return False
    run(end.pid, ['tc', 'qdisc', 'add', *dev, 'clsact'], None)
    return True


def _tc_set_filter(run: Runner, end: LinkEnd, loss_pct: float) -> None:
    """Install, or replace, the random-drop filter on clsact egress."""
    run(end.pid, ['tc', 'filter', 'replace', 'dev', end.intf, 'egress',
                  'pref', TC_GRAY_PREF, 'handle', '1', 'bpf', 'da',
                  'bytecode', random_drop_bytecode(loss_pct)], None)


def _tc_gray_off(run: Runner, end: LinkEnd, added_clsact: bool) -> None:
    dev = ['dev', end.intf]
    if added_clsact:
        run(end.pid, ['tc', 'qdisc', 'del', *dev, 'clsact'], None)
    else:
        run(end.pid, ['tc', 'filter', 'del', *dev, 'egress', 'pref',
                      TC_GRAY_PREF], None)


@cache
def tc_random_drop_available() -> bool:
    """Try the gray-loss filter on a veth in a scratch namespace."""
    if os.geteuid() != 0 or not shutil.which('tc') or not shutil.which('ip'):
        return False
    ns = 'mrcgray%d' % os.getpid()   # clean.py removes mrc* namespaces
    steps = [['ip', 'link', 'add', 'g0', 'type', 'veth', 'peer', 'name', 'g1'],
             ['tc', 'qdisc', 'add', 'dev', 'g0', 'clsact'],
             ['tc', 'filter', 'add', 'dev', 'g0', 'egress', 'bpf', 'da',
              'bytecode', random_drop_bytecode(50)]]
    try:
        if subprocess.run(['ip', 'netns', 'add', ns],
                          capture_output=True).returncode:
            return False
        return all(subprocess.run(['ip', 'netns', 'exec', ns, *step],
                                  capture_output=True).returncode == 0
                   for step in steps)
    finally:
        subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)


def _gray_detail(gray: GrayLoss) -> str:
    where = ', '.join(e.where() for e in gray.link.ends)
    if gray.method == 'tc':
        return 'tc clsact egress bpf filter stealing %.2f%% on %s' % (
            gray.loss_pct, where)
    return 'nft table netdev %s dropping %.2f%% at egress of %s' % (
        gray.table, gray.loss_pct, where)


_COUNTER = re.compile(r'counter packets (\d+) bytes \d+')


def _counter_packets(listing: str) -> list[int]:
    return [int(n) for n in _COUNTER.findall(listing)]


def _check_loss(loss_pct: float) -> float:
    if isinstance(loss_pct, bool) or not isinstance(loss_pct, (int, float)) \
            or not 0 < loss_pct <= 100:
        raise FaultError('loss_pct must be a number in (0, 100], got %r'
                         % (loss_pct,))
    return float(loss_pct)

"""report.md and the summary table printed at the end of a run."""
from __future__ import annotations

COLUMNS = [('fabric', None, None), ('CC', 'congestion_control', '%s'),
           ('QPs', 'qps_per_connection', '%d'),
           ('goodput Mbit/s', 'goodput_mbps', '%.1f'),
           ('flows done', None, None),
           ('corrupt B', 'bytes_corrupted', '%d'),
           ('p50 s', 'p50', '%.3f'), ('p99 s', 'p99', '%.3f'),
           ('rtx MB', 'retransmitted_bytes', None),
           ('recovery s', None, None),
           ('routes moved s', None, None),
           ('Jain planes', 'jain_planes', '%.3f'),
           ('Jain paths', 'jain_paths', '%.3f'),
           ('result', None, None)]


def _cell(name: str, m: dict) -> str:
    if name == 'flows done':
        return '%d/%d' % (m['flows_done'], m['flows'])
    if name == 'rtx MB':
        return '%.2f' % (m['retransmitted_bytes'] / 1e6)
    if name == 'recovery s':
        return ', '.join(_recovery(r, m) for r in m['recovery']) or '-'
    if name == 'result':
        return _verdict(m)
    if name == 'fabric':
        delay = m.get('convergence_delay_s')
        return m.get('fabric', '-') + ('' if delay is None
                                        else ' (converges %.2f s)' % delay)
    if name == 'routes moved s':
        moved = m.get('routes_moved', [])
        return ', '.join('-' if r['after_s'] is None else '+%.2f' % r['after_s']
                         for r in moved) or '-'
    key, fmt = next((k, f) for n, k, f in COLUMNS if n == name)
    if key in ('p50', 'p99'):
        value = m['step_%s_s' % key]
        value = m['fct_%s_s' % key] if value is None else value
    else:
        value = m.get(key)
    return '-' if value is None else fmt % value


def _recovery(r: dict, m: dict) -> str:
    """A recovery's time; one not seen is 'never' when the job died, and else
    longer than the load lasted after the fault ('>0.10')."""
    if r['recovery_s'] is not None:
        return '%.2f' % r['recovery_s']
    if m['aborted'] or r.get('observed_s') is None:
        return 'never'
    return '>%.2f' % r['observed_s']


def _verdict(m: dict) -> str:
    if not m['trusted']:
        return 'NOT TRUSTED: ' + '; '.join(m['health']['reasons'])
    if m['bytes_corrupted']:
        return 'CORRUPTED'
    if m['completed']:
        return 'completed' + _stalls(m)
    return ('QP error: ' + ', '.join(m['qp_errors']) if m['qp_errors']
            else 'unfinished at end of run') + _stalls(m)


def _stalls(m: dict) -> str:
    """What a compressed deployed ACK timer stood for (deployed_ack_timer):
    the hardware wait its completion times leave out."""
    timer, counters = m.get('deployed_ack_timer'), m.get('transport_counters') or {}
    if not timer or not counters.get('ack_timer_stalls'):
        return ''
    timeouts = counters['ack_timer_hardware_timeouts']
    text = '; %s ACK-timer stall(s) = %s x %.2f s in hardware (NCCL_IB_TIMEOUT %d), ' \
        'not in its times' % (_number(counters['ack_timer_stalls']), _number(timeouts),
                              timer['timeout_s'], timer['nccl_ib_timeout'])
    if counters.get('ack_timer_stalled_at_end'):
        text += ', %s still stalled at the end' % _number(counters['ack_timer_stalled_at_end'])
    return text


def _number(value: float) -> str:
    """A count, which a median over repetitions can make a half."""
    return '%g' % value


def table(summary: dict[str, dict]) -> str:
    names = [n for n, _k, _f in COLUMNS]
    rows = [[t] + [_cell(n, m) for n in names] for t, m in summary.items()]
    header = ['transport'] + names
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = '  '.join('%-*s' % (w, h) for w, h in zip(widths, header))
    return '\n'.join([line] + ['  '.join('%-*s' % (w, c) for w, c in
                                         zip(widths, row)) for row in rows])


def markdown(scenario, summary: dict[str, dict], plots: list[str],
             meta: dict) -> str:
    names = ['transport'] + [n for n, _k, _f in COLUMNS]
    lines = ['# %s' % scenario.name, '', scenario.description.strip(), '',
             '- topology `%s`, links %g Mbit/s, duration %g s, seed %d%s' % (
                 scenario.topology, scenario.link_rate_mbit,
                 scenario.duration_s, scenario.seed,
                 ', quick form' if meta.get('quick') else ''),
             '- run %s UTC on %s; endpoint core: %s; %s' % (
                 meta['started_utc'], meta['machine'],
                 meta.get('endpoint_core', 'not recorded'), _fabrics(meta)), '',
             '| ' + ' | '.join(names) + ' |',
             '|' + '---|' * len(names)]
    for transport, m in summary.items():
        lines.append('| %s | %s |' % (transport, ' | '.join(
            _cell(n, m) for n in names[1:])))
    lines += ['', 'Recovery: seconds from each disruptive fault until goodput '
              '(100 ms mean) is back to 90% of what the fault left of its level '
              'in the second before (a fault that takes an eighth of the paths '
              'leaves seven eighths); "never" = not before the next fault or '
              'the workload\'s tail. p50/p99 are training-step times for '
              'collectives, flow completion times otherwise. Fabric: SRv6 '
              '(static source routes) or routed (ECMP groups the controller '
              'repairs a convergence delay after a port-status); routes moved: '
              'after each disruptive fault, when the controller first rewrote '
              'groups.', '']
    lines += congestion_section(summary)
    notes = sorted({r for m in summary.values()
                    for r in m['health'].get('reasons', [])})
    lines += emulator_section(summary)
    if notes:
        lines += ['## Emulation health', ''] + ['- %s' % n for n in notes] + [
            '', 'Rows marked NOT TRUSTED were measured while the emulator '
            'could not keep up or lacked a feature: read them as such.', '']
    lines += ['## Plots', ''] + ['![%s](%s)' % (p, p) for p in plots]
    return '\n'.join(lines) + '\n'


def emulator_section(summary: dict) -> list[str]:
    """Which switch ports forwarded, where the emulation ran on the cores, and how long
    it waited for them."""
    lines = []
    for name, m in summary.items():
        ports, placed = m['health'].get('switch_ports'), m['health'].get('cpu_placement')
        if ports:
            lines.append('- %s: %s switch ports (%s)%s%s' % (
                name, ports['type'], ports['why'], '' if not placed else
                '; PMD thread on core %s, endpoint loop on core %s at nice %d' % (
                    ','.join(map(str, placed['pmd_cores'])),
                    ','.join(map(str, placed['endpoint_cores'])),
                    placed['endpoint_nice']), _long_waits(m['health'])))
            if m['health'].get('host_decap') == 'ebpf':
                lines[-1] += '; the hosts decapsulate with eBPF (no seg6local here)'
    return ['## Emulator', ''] + lines + [''] if lines else []


def _long_waits(health: dict) -> str:
    """The waits for a CPU the health gate limits (emulation_health.LONG_WAIT_RTT)."""
    shares, longest = health.get('long_cpu_wait'), health.get('longest_cpu_wait_s')
    if not shares:
        return ''
    return ('; waits for a CPU of %.2f ms or more (the gate\'s): endpoint loop %.1f %%, '
            'ovs-vswitchd %.1f %% of the run (the longest under %.0f and %.0f ms)' % (
                1e3 * health['long_cpu_wait_s'], 100 * shares['endpoint'],
                100 * shares['vswitchd'], 1e3 * longest['endpoint'],
                1e3 * longest['vswitchd']))


CONGESTION_COLUMNS = ('transport', 'CE marks', 'trims', 'queue drops',
                      'NSCC queueing p50 / p99', 'packet timeouts',
                      'CNPs / rate cuts', 'false demotions', 'incast victim')


def congestion_section(summary: dict[str, dict]) -> list[str]:
    """What the fabric signalled and what the transports saw of it."""
    rows = [_congestion_row(t, m) for t, m in summary.items()]
    signals = next((m['signals'] for m in summary.values() if m.get('signals')),
                   None)
    where = ('switch ports mark CE above %s B of queue (not on the last hop) '
             'and trim above %s B' % (signals['mark_threshold_bytes'],
                                     signals['trim_threshold_bytes'])
             if signals else 'the switch ports signal nothing (no ECN, no '
             'trimming): congestion shows as delay and loss')
    return ['## Congestion', '', 'On this fabric the %s. Queueing is the '
            'delay NSCC measured above its base RTT, against its target; '
            'CNPs are what DCQCN\'s notification points sent on CE marks, '
            'rate cuts what its reaction points made of them; a '
            'false demotion is an EV demoted although no fault of the run '
            'touched its path.' % where, '',
            '| ' + ' | '.join(CONGESTION_COLUMNS) + ' |',
            '|' + '---|' * len(CONGESTION_COLUMNS)] + [
        '| ' + ' | '.join(row) + ' |' for row in rows] + ['']


def _congestion_row(transport: str, m: dict) -> list[str]:
    sig = m.get('signals') or {}
    q = m.get('queueing_delay')
    counters = m.get('transport_counters') or {}
    victim = m.get('victim')
    return [
        transport, _count(sig.get('ce_marked')), _count(sig.get('trimmed')),
        _count(sig.get('queue_drops')),
        '-' if not q else '%s / %s ms (%s / %s × target %.1f ms)' % (
            q['p50_ms'], q['p99_ms'], q['p50_targets'], q['p99_targets'],
            q['target_ms']),
        _count(counters.get('packet_timeouts')),
        '-' if 'cnps_sent' not in counters else '%d / %s' % (   # ours only
            counters['cnps_sent'], _count(counters.get('rate_cuts'))),
        _count(m.get('false_demotions')),
        '-' if not victim else 'never finished' if not victim['completed']
        else '%.2f Mbit/s, %.0f%% of what it could reach' % (
            victim['mbps'], 100 * victim['of_reach'])]


def _count(value) -> str:
    return '-' if value is None else '%d' % value


def _fabrics(meta: dict) -> str:
    """How the transports got their fabrics (summary.json's `fabrics`)."""
    fabrics = meta.get('fabrics')
    if fabrics is None or fabrics['per_transport']:
        return 'a fresh fabric per transport'
    return 'one fabric for all transports, settled between them (%d rebuilt)' % (
        fabrics['rebuilt'])

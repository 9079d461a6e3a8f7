"""report.md and the summary table printed at the end of a run."""
from __future__ import annotations

COLUMNS = [('goodput Mbit/s', 'goodput_mbps', '%.1f'),
           ('flows done', None, None),
           ('corrupt B', 'bytes_corrupted', '%d'),
           ('p50 s', 'p50', '%.3f'), ('p99 s', 'p99', '%.3f'),
           ('rtx MB', 'retransmitted_bytes', None),
           ('recovery s', None, None),
           ('Jain planes', 'jain_planes', '%.3f'),
           ('Jain paths', 'jain_paths', '%.3f'),
           ('result', None, None)]


def _cell(name: str, m: dict) -> str:
    if name == 'flows done':
        return '%d/%d' % (m['flows_done'], m['flows'])
    if name == 'rtx MB':
        return '%.2f' % (m['retransmitted_bytes'] / 1e6)
    if name == 'recovery s':
        values = [r['recovery_s'] for r in m['recovery']]
        return ', '.join('never' if v is None else '%.2f' % v
                         for v in values) or '-'
    if name == 'result':
        return _verdict(m)
    key, fmt = next((k, f) for n, k, f in COLUMNS if n == name)
    if key in ('p50', 'p99'):
        value = m['step_%s_s' % key]
        value = m['fct_%s_s' % key] if value is None else value
    else:
        value = m[key]
    return '-' if value is None else fmt % value


def _verdict(m: dict) -> str:
    if not m['trusted']:
        return 'NOT TRUSTED: ' + '; '.join(m['health']['reasons'])
    if m['bytes_corrupted']:
        return 'CORRUPTED'
    if m['completed']:
        return 'completed'
    return 'QP error: ' + ', '.join(m['qp_errors']) if m['qp_errors'] \
        else 'unfinished at end of run'


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
             '- run %s UTC on %s' % (meta['started_utc'], meta['machine']), '',
             '| ' + ' | '.join(names) + ' |',
             '|' + '---|' * len(names)]
    for transport, m in summary.items():
        lines.append('| %s | %s |' % (transport, ' | '.join(
            _cell(n, m) for n in names[1:])))
    lines += ['', 'Recovery: seconds from each disruptive fault until goodput '
              '(100 ms mean) is back to 90% of its level in the second before;'
              ' "never" = not within the run. p50/p99 are training-step times '
              'for collectives, flow completion times otherwise.', '']
    notes = sorted({r for m in summary.values()
                    for r in m['health'].get('reasons', [])})
    if notes:
        lines += ['## Emulation health', ''] + ['- %s' % n for n in notes] + [
            '', 'Rows marked NOT TRUSTED were measured while the emulator '
            'could not keep up or lacked a feature: read them as such.', '']
    lines += ['## Plots', ''] + ['![%s](%s)' % (p, p) for p in plots]
    return '\n'.join(lines) + '\n'

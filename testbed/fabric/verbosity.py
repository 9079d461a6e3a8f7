"""How much a run says: Mininet's log level, for the whole process.

Mininet keeps one logger per process, so its level is the process's too.
The command's `-v` / `-q` set it (`set_level`); FabricNet applies it when it
builds a fabric. Level names and order are Mininet's (`mininet.log.LEVELS`).
By default a fabric builds quietly (Mininet's warnings and errors only);
the command's own progress lines are shown down to `warning`, so `-q`
(errors only) hides them too.
"""
from __future__ import annotations

# Most to least verbose, as `mn -v` names them.
LEVELS = ('debug', 'info', 'output', 'warning', 'error', 'critical')
DEFAULT = 'warning'
_current = DEFAULT


def level_for(verbose: int, quiet: int) -> str:
    """`-v` one step more verbose per flag (info, then debug: Mininet's
    output level is only for its CLI), `-q` one step quieter (error, then
    critical)."""
    steps = {0: DEFAULT, 1: 'info', 2: 'debug', -1: 'error', -2: 'critical'}
    return steps[max(-2, min(2, verbose - quiet))]


def set_level(name: str) -> None:
    global _current
    if name not in LEVELS:
        raise ValueError('unknown log level %r (one of: %s)'
                         % (name, ', '.join(LEVELS)))
    _current = name


def level() -> str:
    return _current


def shows(name: str) -> bool:
    """Whether a message at level `name` is shown at the current level."""
    return LEVELS.index(name) >= LEVELS.index(_current)


def at_least(name: str) -> str:
    """The current level, or `name` where that is more verbose (the
    interactive CLI needs Mininet's `output` to talk)."""
    return min(_current, name, key=LEVELS.index)

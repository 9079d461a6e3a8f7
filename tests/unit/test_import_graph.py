"""The project's import graph: no cycles, and every package imports only the
rooms below it (the NIC nothing of the project, the fabric never the
workload or the shell). Imports inside functions count; those under
`if TYPE_CHECKING:` do not (they never run)."""
from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ('testbed',)
# What each room may import besides itself (by module prefix). Anything not
# listed here is refused, so a new room has to say where it sits.
ALLOWED = {
    'testbed.nic': (),
    'testbed.topologies': (),
    # The switch ports trim and classify MRC packets (the wire format) and set
    # their thresholds from NSCC's target (the emulated timescale).
    'testbed.fabric': ('testbed.topologies', 'testbed.nic', 'testbed.checkout'),
    'testbed.controller': ('testbed.fabric',),
    'testbed.mrc_ctl': ('testbed.nic', 'testbed.fabric.usid_plan'),
    'testbed.kernel': ('testbed.fabric', 'testbed.nic'),
    'testbed.workload': ('testbed.fabric', 'testbed.nic', 'testbed.mrc_ctl',
                         'testbed.kernel', 'testbed.topologies', 'testbed.native_core'),
    'testbed.shell': ('testbed.fabric', 'testbed.nic', 'testbed.mrc_ctl',
                      'testbed.workload'),
    'testbed.bench': ('testbed.fabric', 'testbed.nic', 'testbed.mrc_ctl',
                      'testbed.kernel', 'testbed.workload', 'testbed.checkout',
                      'testbed.native_core'),
    # The cross-check reads a scenario and its run's results, and runs htsim.
    'testbed.reference': ('testbed.fabric', 'testbed.nic', 'testbed.workload'),
    'testbed.cli': ('testbed', 'testbed.bench'),
    # Where the source checkout is (stdlib only): what is written beside it.
    'testbed.checkout': (),
    # The compiled endpoint core: found beside the checkout; it reads testbed/nic's
    # sources (to match a build to them) and imports none of them.
    'testbed.native_core': ('testbed.checkout',),
    'testbed.native_build': ('testbed.native_core',),
    'testbed': ('testbed.native_core',),   # its __init__: the version, the core
}


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob('*.py'):
            parts = path.relative_to(ROOT).with_suffix('').parts
            name = '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)
            found[name] = path
    return found


def _runtime_imports(tree: ast.AST) -> Iterator[ast.AST]:
    """Import nodes, skipping `if TYPE_CHECKING:` bodies."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and 'TYPE_CHECKING' in ast.unparse(
                node.test):
            yield from (n for child in node.orelse
                        for n in _runtime_imports(child))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _runtime_imports(node)


def edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, path in mods.items():
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.level == 0, '%s: relative import' % name
                # `from pkg import module` is an edge to the module; the
                # package counts only when a name comes from it.
                subs = ['%s.%s' % (node.module, a.name) for a in node.names]
                targets = [t for t in subs if t in mods] or [node.module]
            else:
                targets = [a.name for a in node.names]
            graph[name] |= {t for t in targets if t in mods and t != name}
    return graph


def room(module: str) -> str:
    return max((r for r in ALLOWED if module == r or module.startswith(
        r + '.')), key=len)


def test_no_module_imports_the_tests():
    for name, path in modules().items():
        for node in _runtime_imports(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) else [
                a.name for a in node.names]
            assert not any(n == 'tests' or n.startswith('tests.')
                           for n in names if n), name


def test_every_edge_goes_down():
    upward = []
    for source, targets in edges(modules()).items():
        home = room(source)
        for target in targets:
            if room(target) == home or any(
                    target == p or target.startswith(p + '.')
                    for p in ALLOWED[home]):
                continue
            upward.append('%s -> %s' % (source, target))
    assert upward == []


def test_no_cycles():
    graph = edges(modules())
    state: dict[str, int] = {}          # 1: on the stack, 2: done
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_the_rules_can_fail():
    # The checks above see real edges: the workload imports the fabric, and
    # a made-up room with no allowance would have upward edges.
    graph = edges(modules())
    assert 'testbed.fabric.net' in graph['testbed.workload.runner']
    assert room('testbed.fabric.faults.injector') == 'testbed.fabric'
    assert room('testbed.cli') == 'testbed.cli'

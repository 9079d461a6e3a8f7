"""One fabric for one transport's run after another.

`mrc-testbed run` gives every transport a fresh fabric. A scenario run given
one to share (`run_scenario(shared=...)`: the test suite's, where an AF_XDP
fat-tree takes 30-110 s to build, and the interactive CLI's `scenario`
command, on the CLI's own fabric) runs the transports on it instead, made to
look fresh to each:

- between two runs the fabric settles (testbed.fabric.baseline): the
  controller's last repair applied, then flows, groups, links, filters and
  tables compared with what they were before the first run. A fabric of our
  own that does not come back so is replaced by a fresh one; a fabric we
  were given (the CLI's) cannot be, so the run goes on and says what differs;
- each run gets the switch ports its congestion control's fabric would have
  been built with: a RoCE CC's marks on the last hop too (runner.marks_last_hop).

One SharedFabric can carry several scenarios of the same fabric (the test
suite's do), each settled from the last as transports are.
"""
from __future__ import annotations

from testbed.fabric import port_config
from testbed.fabric.baseline import Baseline
from testbed.fabric.net import FabricNet
from testbed.fabric.topo_spec import TopoSpec
from testbed.workload.runner import Progress, marks_last_hop


class SharedFabric:
    """Use as a context manager; `for_run(cc)` before each transport's run."""

    def __init__(self, spec: TopoSpec, progress: Progress,
                 convergence_delay_s: float | None = None,
                 given: FabricNet | None = None) -> None:
        """`spec`: the fabric without a CC's own settings; `given`: a running
        fabric to use (left running), instead of building one."""
        self.spec, self.progress = spec, progress
        self.delay = {} if convergence_delay_s is None else {
            'convergence_delay_s': convergence_delay_s}
        self.given = given
        self.given_marks_last_hop = bool(given and given.signals and
                                         given.signals.settings.mark_last_hop)
        self.fab: FabricNet | None = given
        self.baseline: Baseline | None = None
        self.rebuilt = 0

    def __enter__(self) -> 'SharedFabric':
        return self

    def __exit__(self, *exc) -> None:
        if self.fab is not None and self.fab is not self.given:
            self.fab.stop()
        if self.given is not None and self.given.signals is not None:
            self.given.signals.mark_last_hop(self.given_marks_last_hop)  # as it was
        self.fab = None

    def check_fits(self, spec: TopoSpec, convergence_delay_s: float | None) -> None:
        """Refuse a scenario whose fabric this is not."""
        delay = self.delay.get('convergence_delay_s')
        if spec != self.spec or (convergence_delay_s is not None
                                 and convergence_delay_s != delay):
            raise ValueError('the scenario runs on %s (convergence delay %s), '
                             'the shared fabric is %s (%s)' % (
                                 spec, convergence_delay_s, self.spec, delay))

    def for_run(self, cc: str | None) -> FabricNet:
        """The fabric for the next run, settled after the last one."""
        if self.fab is None:
            self._build()
        elif self.baseline is None:
            self.baseline = self.fab.baseline()   # a given fabric, as it is now
        else:
            self._settle()
        assert self.fab is not None
        if self.fab.signals is not None:
            self.fab.signals.mark_last_hop(marks_last_hop(cc))
        return self.fab

    def _build(self) -> None:
        fab = FabricNet(self.spec, **self.delay)
        fab.__enter__()
        self.fab, self.baseline = fab, fab.baseline()

    def _settle(self) -> None:
        assert self.baseline is not None
        left = self.baseline.settle()
        if not left:
            # A fresh fabric's datapath caches no flow: the last run's go, or
            # the next run's first faults would wait for OVS to go through
            # them (a link's cut purges them: port_config).
            port_config.purge_cached_flows()
            return
        if self.fab is self.given:
            self.progress('the fabric is not as before the last run (%s): '
                          'the next run goes on on it' % '; '.join(left))
            return
        self.progress('the fabric is not as built after the last run (%s): '
                      'building a fresh one' % '; '.join(left))
        assert self.fab is not None
        self.fab.stop()
        self.fab = None
        self.rebuilt += 1
        self._build()

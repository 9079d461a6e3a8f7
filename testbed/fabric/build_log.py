"""Where every fabric's build and teardown times go, phase by phase.

A build's phases (`FabricNet.timings`): waiting for the run lock, the
controller, Mininet's nodes and links, the AF_XDP ports opening, the
controller's flows, the hosts' plumbing and the switch ports' signals; then
the teardown. With `MRC_FABRIC_LOG` set to a file, each build and each
teardown appends one JSON line there, whichever process built the fabric
(the test suite sums them per test module; a child `mrc-testbed run`
inherits the variable). Without it nothing is written.
"""
from __future__ import annotations

import json
import os
import time

ENV = 'MRC_FABRIC_LOG'


def record(event: str, spec: str, afxdp: bool, timings: dict[str, float]) -> None:
    """Append one line: `event` ('built' or 'torn_down'), the fabric's spec,
    its kind of switch port and its phase times in seconds."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = {'event': event, 'spec': spec, 'afxdp': afxdp, 'pid': os.getpid(),
            'time': time.time(), **{k: round(v, 3) for k, v in timings.items()}}
    with open(path, 'a') as f:      # one write of a short line: atomic in O_APPEND
        f.write(json.dumps(line) + '\n')

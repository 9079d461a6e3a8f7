"""Congestion control for MRC QPCCs: a registry of controllers selected by CcProfile.

base.py is the registry, the controller interface and the profile; every other module
here is one controller and registers itself under its algorithm string when imported.
The imports below are what load the built-in controllers: adding one is that module plus
one line here.
"""

from __future__ import annotations

from testbed.nic.cc import dcqcn, null, nscc  # noqa: F401  (importing registers them)
from testbed.nic.cc.base import (
    NULL_ALGORITHM,
    CcAlgorithm,
    CcConfigError,
    CcFactory,
    CcProfile,
    CongestionControl,
    Unpaced,
    cc_algorithm,
    make_cc,
    register_cc,
    registered_cc_algorithms,
)
from testbed.nic.cc.dcqcn import (
    DCQCN_ALGORITHM,
    Dcqcn,
    DcqcnConfig,
    DcqcnConfigError,
    DcqcnCounters,
)
from testbed.nic.cc.nscc import NSCC_ALGORITHM, Nscc, NsccCounters, rtt_sample_is_unambiguous
from testbed.nic.cc.nscc_config import NsccConfig, NsccConfigError
from testbed.nic.cc.null import NullCc

__all__ = [
    "DCQCN_ALGORITHM", "Dcqcn", "DcqcnConfig", "DcqcnConfigError", "DcqcnCounters",
    "Unpaced", "NSCC_ALGORITHM", "NULL_ALGORITHM", "CcAlgorithm", "CcConfigError", "CcFactory",
    "CcProfile", "CongestionControl", "Nscc", "NsccConfig", "NsccConfigError",
    "NsccCounters", "NullCc", "cc_algorithm", "make_cc", "register_cc",
    "registered_cc_algorithms", "rtt_sample_is_unambiguous",
]

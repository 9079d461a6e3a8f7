"""The congestion controls a scenario may give the kernel's transports.

Linux has shipped CUBIC as its default TCP congestion control since 2.6.19
(RFC 9438, https://www.rfc-editor.org/rfc/rfc9438, section 1; the kernel's
net/ipv4/Kconfig, DEFAULT_TCP_CONG), and the stock Debian and Ubuntu kernels
keep it. A machine's own default can
be another one (this project's CI machines default to BBR), so the kernel
baselines set theirs on every socket instead of inheriting the namespace's,
and the results say which ran. MPTCP's subflows take the one set on the
MPTCP socket (Linux 5.19+, net/mptcp/sockopt.c).
"""
from __future__ import annotations

from collections.abc import Mapping

KERNEL_CC: Mapping[str, str] = {
    'cubic': "Linux's default (a cubic window growth, loss-based)",
    'bbr': "Google's BBR (a model of the path's rate and RTT)",
    'reno': 'NewReno (additive increase, halving on loss)',
}
DEFAULT_KERNEL_CC = 'cubic'

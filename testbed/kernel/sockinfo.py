"""What the kernel says about a TCP or MPTCP connection: TCP_INFO,
MPTCP's subflow table, /proc/net counters, interface byte counts."""
from __future__ import annotations

import ctypes
import socket
import struct
from dataclasses import dataclass

from testbed.fabric.sockopt import getsockopt_into

IPPROTO_MPTCP = 262
SOL_MPTCP = 284
MPTCP_TCPINFO = 2
MPTCP_SUBFLOW_ADDRS = 3
TCP_CONGESTION = 13
TCP_INFO_SIZE = 232                 # struct tcp_info up to tcpi_snd_wnd
SUBFLOW_ADDRS_SIZE = 256            # two struct __kernel_sockaddr_storage
SUBFLOW_DATA_SIZE = 16              # struct mptcp_subflow_data
MAX_SUBFLOWS = 16


@dataclass(frozen=True)
class SubflowStats:
    """One TCP connection or MPTCP subflow, as the sender's kernel sees it."""
    plane: int
    local: str
    local_port: int
    remote: str
    remote_port: int
    bytes_acked: int
    bytes_sent: int
    bytes_retrans: int
    total_retrans: int
    rtt_us: int
    cwnd: int


def _tcp_info_fields(raw: bytes) -> dict[str, int]:
    raw = raw.ljust(TCP_INFO_SIZE, b'\0')
    return {'state': raw[0],
            'rtt_us': struct.unpack_from('I', raw, 68)[0],
            'cwnd': struct.unpack_from('I', raw, 80)[0],
            'total_retrans': struct.unpack_from('I', raw, 100)[0],
            'bytes_acked': struct.unpack_from('Q', raw, 120)[0],
            'bytes_sent': struct.unpack_from('Q', raw, 200)[0],
            'bytes_retrans': struct.unpack_from('Q', raw, 208)[0]}


def tcp_info(sock: socket.socket) -> dict[str, int]:
    return _tcp_info_fields(sock.getsockopt(socket.IPPROTO_TCP,
                                            socket.TCP_INFO, TCP_INFO_SIZE))


def _subflow_array(sock: socket.socket, option: int, size_user: int
                   ) -> tuple[int, list[bytes]]:
    """(subflows the kernel has, the elements that fit our buffer)."""
    buf = ctypes.create_string_buffer(SUBFLOW_DATA_SIZE +
                                      MAX_SUBFLOWS * size_user)
    struct.pack_into('IIII', buf, 0, SUBFLOW_DATA_SIZE, 0, 0, size_user)
    getsockopt_into(sock.fileno(), SOL_MPTCP, option, buf)
    count = struct.unpack_from('I', buf, 4)[0]
    raw = buf.raw
    return count, [raw[SUBFLOW_DATA_SIZE + i * size_user:
                       SUBFLOW_DATA_SIZE + (i + 1) * size_user]
                   for i in range(min(count, MAX_SUBFLOWS))]


def _sockaddr6(raw: bytes) -> tuple[str, int]:
    port = struct.unpack_from('!H', raw, 2)[0]
    return socket.inet_ntop(socket.AF_INET6, raw[8:24]), port


def mptcp_subflows(sock: socket.socket) -> list[tuple[str, int, str, int,
                                                      dict[str, int]]]:
    """(local, lport, remote, rport, tcp_info fields) per subflow of an
    MPTCP socket. Two getsockopts walk the same subflow list; when a subflow
    came or went in between, read again."""
    for _ in range(3):
        n_info, infos = _subflow_array(sock, MPTCP_TCPINFO, TCP_INFO_SIZE)
        n_addr, addrs = _subflow_array(sock, MPTCP_SUBFLOW_ADDRS,
                                       SUBFLOW_ADDRS_SIZE)
        if n_info == n_addr:
            return [(*_sockaddr6(a[:128]), *_sockaddr6(a[128:]),
                     _tcp_info_fields(i)) for a, i in zip(addrs, infos)]
    return []


def _proc_net(pid: int, name: str) -> str:
    with open('/proc/%d/net/%s' % (pid, name)) as f:
        return f.read()


def mptcp_counters(pid: int) -> dict[str, int]:
    """The namespace's MPTcpExt* counters (what `nstat` shows)."""
    lines = [l.split() for l in _proc_net(pid, 'netstat').splitlines()
             if l.startswith('MPTcpExt:')]
    if len(lines) < 2:
        return {}
    return {'MPTcpExt' + k: int(v) for k, v in zip(lines[0][1:], lines[1][1:])}


def interface_bytes(pid: int) -> dict[str, tuple[int, int]]:
    """intf -> (rx bytes, tx bytes) in a namespace."""
    out = {}
    for line in _proc_net(pid, 'dev').splitlines()[2:]:
        name, _, rest = line.partition(':')
        fields = rest.split()
        out[name.strip()] = (int(fields[0]), int(fields[8]))
    return out

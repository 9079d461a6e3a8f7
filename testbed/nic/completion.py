"""Work requests, work completions and completion queues (the `ibv_wc` view of a QP).

Statuses and opcodes mirror `enum ibv_wc_status` / `enum ibv_wc_opcode` of libibverbs
(https://github.com/linux-rdma/rdma-core/blob/master/libibverbs/verbs.h), which
`mrc_poll_cq` fills "like ibv_poll_cq()" (mrc.h).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass


class WrOpcode(enum.StrEnum):
    """Send work-request opcodes of verbs; MRC accepts only the two RDMA WRITE kinds."""

    RDMA_WRITE = "RDMA_WRITE"
    RDMA_WRITE_WITH_IMM = "RDMA_WRITE_WITH_IMM"
    SEND = "SEND"
    SEND_WITH_IMM = "SEND_WITH_IMM"
    RDMA_READ = "RDMA_READ"
    ATOMIC_CMP_AND_SWP = "ATOMIC_CMP_AND_SWP"
    ATOMIC_FETCH_AND_ADD = "ATOMIC_FETCH_AND_ADD"


MRC_OPCODES = frozenset({WrOpcode.RDMA_WRITE, WrOpcode.RDMA_WRITE_WITH_IMM})


class WcStatus(enum.StrEnum):
    SUCCESS = "SUCCESS"
    LOC_QP_OP_ERR = "LOC_QP_OP_ERR"
    WR_FLUSH_ERR = "WR_FLUSH_ERR"
    REM_INV_REQ_ERR = "REM_INV_REQ_ERR"
    REM_ACCESS_ERR = "REM_ACCESS_ERR"
    REM_OP_ERR = "REM_OP_ERR"
    RETRY_EXC_ERR = "RETRY_EXC_ERR"


STATUS_TEXT = {
    WcStatus.SUCCESS: "success",
    WcStatus.LOC_QP_OP_ERR: "local QP operation error",
    WcStatus.WR_FLUSH_ERR: "work request flushed",
    WcStatus.REM_INV_REQ_ERR: "remote invalid request",
    WcStatus.REM_ACCESS_ERR: "remote access error",
    WcStatus.REM_OP_ERR: "remote operation error",
    WcStatus.RETRY_EXC_ERR: "retry counter exceeded",
}


class WcOpcode(enum.StrEnum):
    RDMA_WRITE = "RDMA_WRITE"                       # requester side
    RECV_RDMA_WITH_IMM = "RECV_RDMA_WITH_IMM"       # responder side, WRITE_WITH_IMM only


@dataclass(frozen=True, slots=True)
class WorkCompletion:
    wr_id: int
    status: WcStatus
    opcode: WcOpcode
    qp_num: int
    byte_len: int = 0
    imm_data: int | None = None
    time: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status is WcStatus.SUCCESS

    @property
    def status_text(self) -> str:
        return STATUS_TEXT[self.status]


class CompletionQueue:
    """Unbounded FIFO of completions; poll() takes them like ibv_poll_cq."""

    def __init__(self) -> None:
        self._entries: deque[WorkCompletion] = deque()
        self.total = 0

    def push(self, wc: WorkCompletion) -> None:
        self._entries.append(wc)
        self.total += 1

    def poll(self, max_n: int | None = None) -> list[WorkCompletion]:
        n = len(self._entries) if max_n is None else min(max_n, len(self._entries))
        return [self._entries.popleft() for _ in range(n)]

    def __len__(self) -> int:
        return len(self._entries)

"""The application side of a kernel flow: a sender that writes random
data and hashes it as it goes, a receiver that reads and hashes."""
from __future__ import annotations

import hashlib
import os
import socket

CHUNK_BYTES = 256 << 10             # random data generated and hashed per chunk
IO_ROUNDS = 32                      # send/recv calls per flow per poll: fairness


class _Sender:
    """The connecting end: writes `size` bytes of fresh random data,
    hashing what it writes, then shuts its side down."""

    def __init__(self, sock: socket.socket, size: int) -> None:
        self.sock = sock
        self.remaining = size
        self.digest = hashlib.sha256()
        self.chunk = memoryview(b'')
        self.written = 0
        self.connected = False
        self.done = False

    def on_writable(self) -> None:
        if not self.connected:
            err = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                raise OSError(err, 'connect: ' + os.strerror(err))
            self.connected = True
        for _ in range(IO_ROUNDS):
            if not self.chunk and not self._refill():
                return
            try:
                n = self.sock.send(self.chunk)
            except BlockingIOError:
                return
            self.chunk = self.chunk[n:]
            self.written += n

    def _refill(self) -> bool:
        if self.remaining == 0:
            self.sock.shutdown(socket.SHUT_WR)
            self.done = True
            return False
        data = os.urandom(min(CHUNK_BYTES, self.remaining))
        self.digest.update(data)
        self.remaining -= len(data)
        self.chunk = memoryview(data)
        return True


class _Receiver:
    """The accepting end: reads everything, hashing it, until EOF."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray(CHUNK_BYTES)
        self.view = memoryview(self.buf)
        self.digest = hashlib.sha256()
        self.received = 0

    def on_readable(self) -> bool:
        """Read what is there; True at EOF."""
        for _ in range(IO_ROUNDS):
            try:
                n = self.sock.recv_into(self.buf)
            except BlockingIOError:
                return False
            if n == 0:
                return True
            self.digest.update(self.view[:n])
            self.received += n
        return False

"""A tiny all-reduce for data-parallel training with nothing but the standard library.

Worker 0 listens on TPUOPS_COORDINATOR (host:port); every other worker connects to it. Each step every
worker sends its gradient vector, worker 0 adds them up in worker-id order, divides by the number of
workers and sends the same bytes back to all. Every worker therefore applies bit-identical updates and
the parameters stay equal without ever being compared.

Why so simple: the quickstart must run with only numpy installed. A real framework does the same with
its own runtime (`jax.distributed`, `torch.distributed`, TPUStrategy); this file shows the contract
(who is the coordinator, how workers find each other, what happens when one dies) in under 200 lines.

Safety: only raw bytes travel (`send_bytes`/`recv_bytes`), never pickles, so a peer cannot make another
run code. The authkey (derived from TPUOPS_RUN_ID) keeps workers of two different runs that happen to
share a port from joining each other; it is not a secret.
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import threading
import time
from collections.abc import Callable
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Connection, Listener
from typing import TypeVar

import numpy as np

T = TypeVar("T")


class PeerError(RuntimeError):
    """Another worker died, hung or does not match: the run cannot go on."""


def authkey_for(run_id: str) -> bytes:
    return hashlib.sha256(f"tpuops-charlm:{run_id}".encode()).digest()


def parse_address(coordinator: str) -> tuple[str, int]:
    host, sep, port = coordinator.rpartition(":")
    if not sep or not port.isdigit():
        raise PeerError(f"TPUOPS_COORDINATOR must be host:port, got {coordinator!r}")
    return host.strip("[]"), int(port)


def _with_timeout(fn: Callable[[], T], timeout: float, what: str) -> T:
    """Run a blocking call that has no timeout of its own (accept, the auth handshake) in a thread."""
    result: list[T] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(fn())
        except BaseException as err:  # handed to the caller's thread below
            error.append(err)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise PeerError(f"timed out after {timeout:.0f}s {what}")
    if error:
        raise error[0]
    return result[0]


def _set_send_timeout(conn: Connection, timeout: float) -> Connection:
    """A send to a peer that stopped reading fails after `timeout` instead of blocking forever.

    SO_SNDTIMEO works on the blocking socket the Connection uses (a Python socket timeout would make
    it non-blocking, which Connection does not expect).
    """
    sock = socket.socket(fileno=conn.fileno())
    try:
        seconds = int(timeout)
        sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", seconds, int((timeout - seconds) * 1e6))
        )
    finally:
        sock.detach()  # the Connection keeps owning the file descriptor
    return conn


class Group:
    """The workers of one run. With one worker every operation is a no-op."""

    def __init__(self, worker_id: int, num_workers: int, peers: dict[int, Connection], timeout: float) -> None:
        self.worker_id = worker_id
        self.num_workers = num_workers
        self.peers = peers  # worker 0: {id: connection to that worker}; others: {0: connection to worker 0}
        self.timeout = timeout
        self._listener: Listener | None = None

    # ------------------------------------------------------------------------------------------ setup

    @classmethod
    def connect(
        cls, worker_id: int, num_workers: int, coordinator: str | None, run_id: str, timeout: float = 120.0
    ) -> Group:
        if num_workers <= 1:
            return cls(0, 1, {}, timeout)
        if not coordinator:
            raise PeerError(f"TPUOPS_NUM_WORKERS={num_workers} but TPUOPS_COORDINATOR is not set")
        if not 0 <= worker_id < num_workers:
            raise PeerError(f"TPUOPS_WORKER_ID={worker_id} is outside 0..{num_workers - 1}")
        address, key = parse_address(coordinator), authkey_for(run_id)
        if worker_id == 0:
            return cls._serve(address, key, num_workers, timeout)
        return cls._join(address, key, worker_id, num_workers, timeout)

    @classmethod
    def _serve(cls, address: tuple[str, int], key: bytes, num_workers: int, timeout: float) -> Group:
        try:
            listener = Listener(address, authkey=key)
        except OSError as err:
            raise PeerError(f"worker 0 cannot listen on {address[0]}:{address[1]}: {err}") from None
        peers: dict[int, Connection] = {}

        def accept_all() -> None:
            while len(peers) < num_workers - 1:
                conn = listener.accept()
                hello = json.loads(conn.recv_bytes(4096))
                peer_id, peer_n = int(hello["worker_id"]), int(hello["num_workers"])
                if peer_n != num_workers or not 0 < peer_id < num_workers or peer_id in peers:
                    conn.close()
                    raise PeerError(f"worker {peer_id} of {peer_n} does not belong to this run of {num_workers}")
                peers[peer_id] = _set_send_timeout(conn, timeout)

        try:
            _with_timeout(accept_all, timeout, f"waiting for workers to connect to {address[0]}:{address[1]}")
        except PeerError as err:
            missing = sorted(set(range(1, num_workers)) - set(peers))
            listener.close()
            raise PeerError(f"{err}; missing workers: {missing}") from None
        group = cls(0, num_workers, dict(sorted(peers.items())), timeout)
        group._listener = listener
        return group

    @classmethod
    def _join(cls, address: tuple[str, int], key: bytes, worker_id: int, num_workers: int, timeout: float) -> Group:
        deadline = time.monotonic() + timeout
        while True:
            try:
                conn = _with_timeout(
                    lambda: Client(address, authkey=key), max(1.0, deadline - time.monotonic()), "in the handshake"
                )
                break
            except (ConnectionRefusedError, ConnectionResetError, FileNotFoundError):
                # Worker 0 is not listening yet: workers of a slice start within seconds of each other.
                if time.monotonic() > deadline:
                    raise PeerError(
                        f"worker {worker_id} could not reach the coordinator {address[0]}:{address[1]} "
                        f"within {timeout:.0f}s (is worker 0 running?)"
                    ) from None
                time.sleep(0.2)
            except (AuthenticationError, EOFError, OSError) as err:
                # Something listens there but does not answer as this run's worker 0 (another program, or
                # the coordinator of another run): waiting longer would not help.
                raise PeerError(
                    f"worker {worker_id} could not reach the coordinator {address[0]}:{address[1]}: what answers "
                    f"there is not worker 0 of this run ({err or type(err).__name__}); check TPUOPS_COORDINATOR"
                ) from None
        _set_send_timeout(conn, timeout)
        conn.send_bytes(json.dumps({"worker_id": worker_id, "num_workers": num_workers}).encode())
        return cls(worker_id, num_workers, {0: conn}, timeout)

    def close(self) -> None:
        for conn in self.peers.values():
            conn.close()
        if self._listener is not None:
            self._listener.close()

    # ------------------------------------------------------------------------------------------ messages

    def _recv(self, peer: int) -> bytes:
        conn = self.peers[peer]
        who = "the coordinator (worker 0)" if peer == 0 else f"worker {peer}"
        try:
            if not conn.poll(self.timeout):
                raise PeerError(f"worker {self.worker_id}: nothing from {who} for {self.timeout:.0f}s (is it stuck?)")
            return conn.recv_bytes()
        except (EOFError, ConnectionError, OSError):
            raise PeerError(f"worker {self.worker_id}: lost {who}: it probably crashed, see its log") from None

    def _send(self, peer: int, data: bytes) -> None:
        try:
            self.peers[peer].send_bytes(data)
        except BlockingIOError:  # SO_SNDTIMEO expired: the peer is alive but not reading
            who = "the coordinator (worker 0)" if peer == 0 else f"worker {peer}"
            raise PeerError(
                f"worker {self.worker_id}: {who} took nothing for {self.timeout:.0f}s (is it stuck?)"
            ) from None
        except (ConnectionError, OSError):
            who = "the coordinator (worker 0)" if peer == 0 else f"worker {peer}"
            raise PeerError(f"worker {self.worker_id}: lost {who}: it probably crashed, see its log") from None

    def broadcast(self, data: bytes) -> bytes:
        """Worker 0's bytes to everyone (the initial or restored state, so that all start equal)."""
        if self.num_workers == 1:
            return data
        if self.worker_id == 0:
            for peer in self.peers:
                self._send(peer, data)
            return data
        return self._recv(0)

    def allreduce_mean(self, vector: np.ndarray) -> np.ndarray:
        """The mean of every worker's float32 vector, identical bytes on every worker."""
        if self.num_workers == 1:
            return vector
        vector = np.ascontiguousarray(vector, dtype=np.float32)
        if self.worker_id != 0:
            self._send(0, vector.tobytes())
            return np.frombuffer(self._recv(0), dtype=np.float32).copy()
        total = vector.astype(np.float64)
        for peer in self.peers:  # fixed order: the sum, and so the result, is deterministic
            part = np.frombuffer(self._recv(peer), dtype=np.float32)
            if part.shape != vector.shape:
                raise PeerError(f"worker {peer} sent {part.size} values, expected {vector.size}")
            total += part
        mean = (total / self.num_workers).astype(np.float32)
        data = mean.tobytes()
        for peer in self.peers:
            self._send(peer, data)
        return mean

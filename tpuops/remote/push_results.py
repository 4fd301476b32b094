"""What a push reports: each worker's outcome, its progress as it goes, and the whole tree's result."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerPush:
    """What happened on one worker: `unchanged`, `sent` (over SSH), `relayed` (fetched from a worker)."""

    worker: str
    status: str
    bytes_sent: int = 0
    error: str | None = None
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict[str, object]:
        return {"worker": self.worker, "status": self.status, "bytes_sent": self.bytes_sent, "error": self.error,
                "ok": self.ok, "duration": round(self.duration, 3)}


@dataclass(frozen=True)
class PushProgress:
    """One worker's part in pushing one tree, as it goes: `sending` (from here) or `fetching` (from a relaying
    worker), then how it ended (a WorkerPush status: `unchanged`, `sent`, `relayed`, `failed`)."""

    dest: str
    worker: str
    status: str
    done: int = 0  # bytes of file content sent from here so far
    total: int = 0  # bytes of file content to send, known before the first byte goes
    seconds: float = 0.0  # since this worker's part began (for `sending`: since the first byte)


ProgressHandler = Callable[[PushProgress], None]


@dataclass(frozen=True)
class PushResult:
    dest: str
    tree_id: str
    files: int
    total_bytes: int
    changed_files: int
    payload_bytes: int
    workers: tuple[WorkerPush, ...]

    @property
    def ok(self) -> bool:
        return all(w.ok for w in self.workers)

    @property
    def bytes_sent(self) -> int:
        return sum(w.bytes_sent for w in self.workers)

    def as_dict(self) -> dict[str, object]:
        return {"dest": self.dest, "tree": self.tree_id, "files": self.files, "total_bytes": self.total_bytes,
                "changed_files": self.changed_files, "payload_bytes": self.payload_bytes,
                "bytes_sent": self.bytes_sent, "ok": self.ok, "workers": [w.as_dict() for w in self.workers]}

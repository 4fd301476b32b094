"""Events worth waking up for, POSTed to the webhook the spec names in `guard.notify` (Slack, Discord, ntfy,
any endpoint that takes JSON): one POST per event, tried a few times with backoff, from a thread of its own so
the guard's loop never waits on it. The URL is a secret (a Slack webhook's path is its credential): it is never
printed, logged or written anywhere; a failure names only the HTTP status or the kind of error.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

# Ledger kinds a person wants to hear about at night; the rest stay in the ledger.
WAKE_KINDS = frozenset({"recovered", "gave-up", "ended", "moved"})
ATTEMPTS = 4
FIRST_BACKOFF_S = 1.0
TIMEOUT_S = 10.0
QUEUE_SIZE = 100


class Notifier:
    def __init__(self, url: str, cluster: str, warn: Callable[[str], None] | None = None,
                 backoff: float = FIRST_BACKOFF_S) -> None:
        self._url = url
        self.cluster = cluster
        self.warn = warn or (lambda text: None)
        self.backoff = backoff
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue(maxsize=QUEUE_SIZE)
        self._thread = threading.Thread(target=self._loop, name="tpuops-notify", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:  # never the URL
        return f"Notifier(cluster={self.cluster!r}, url=<secret>)"

    def send(self, kind: str, message: str, **data: Any) -> bool:
        """Queue one event (False when it is not worth waking for, or the queue is full); never blocks."""
        if kind not in WAKE_KINDS:
            return False
        text = f"tpuops {self.cluster}: {kind}: {message}"
        payload = {"cluster": self.cluster, "kind": kind, "message": message, "text": text,
                   "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **data}
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            self.warn("notify: too many events waiting for the webhook; this one is dropped")
            return False
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Let what is queued go out (for at most `timeout`), then stop the thread."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout=timeout)

    def _loop(self) -> None:
        while (payload := self._queue.get()) is not None:
            self._post(payload)

    def _post(self, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        why = ""
        for attempt in range(ATTEMPTS):
            request = urllib.request.Request(self._url, data=body, method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=TIMEOUT_S):  # noqa: S310  (the user's own URL)
                    return
            except urllib.error.HTTPError as err:
                why = f"HTTP {err.code}"
                if err.code < 500 and err.code != 429:
                    break  # the endpoint refuses this request: trying again will not help
            except (urllib.error.URLError, OSError) as err:
                why = type(getattr(err, "reason", err)).__name__
            time.sleep(self.backoff * 2 ** attempt)
        self.warn(f"notify: the webhook did not take the {payload['kind']} event ({why})")

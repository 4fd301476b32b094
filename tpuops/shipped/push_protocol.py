# The push protocol shared by the client (sync.py) and the worker agent (push_agent.py): exit codes, the
# manifest text whose hash is the tree id, and what the client does after each exit code.
#
# Shipped to workers as text: sync.py puts this whole file in place of the agent's import line, so it must
# stay standard-library only, run on python3.8 and have no `from __future__` import (it would land in the
# middle of the agent). Annotations are strings for the same reason.
import hashlib
import json

MANIFEST_VERSION = 1
TREE_ID_CHARS = 24

EXIT_OK = 0
EXIT_OTHER = 1  # anything else (another push running, unknown action, ...)
EXIT_BASE_UNUSABLE = 3  # the worker's current tree cannot serve as the base: the client resends everything
EXIT_NOT_OURS = 4  # DEST exists and was not made by tpuops push
EXIT_FETCH_FAILED = 5  # fetching from the relay worker failed: the client sends directly
EXIT_CORRUPT = 6  # payload truncated, corrupt or malformed
EXIT_DISK = 7  # disk full or a write error



class Fail(Exception):
    """The agent's way to end with an exit code above and a one-line message."""

    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code


# What the client does after an `apply` ended (see `after_apply`).
DONE = "done"
RESEND_FULL = "full"
SEND_DIRECT = "direct"
FAILED = "failed"


def manifest_text(rows: "list") -> str:
    """The manifest as sent and stored; the tree id is the hash of exactly this text."""
    return json.dumps({"version": MANIFEST_VERSION, "files": rows}, separators=(",", ":"))


def tree_id(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:TREE_ID_CHARS]


def after_apply(exit_code: "int | None", base: "str | None", fetched: bool = False) -> str:
    """The one place the client decides how to go on after `apply` on a worker ended with `exit_code`.

    `base` is the tree the payload was a delta against (None: the payload was already everything);
    `fetched` says the worker was to fetch the payload from the relay rather than receive it over SSH.
    A failed fetch, or a base the worker no longer has, falls back to a direct copy (which resends everything
    if the base is still unusable); a delta refused for its base is resent in full; a full payload refused is a
    failure (resending it would fail the same way); no exit code (SSH failed) is a failure."""
    if exit_code == EXIT_OK:
        return DONE
    if fetched and exit_code in (EXIT_FETCH_FAILED, EXIT_BASE_UNUSABLE):
        return SEND_DIRECT
    if exit_code == EXIT_BASE_UNUSABLE and base is not None:
        return RESEND_FULL
    return FAILED

"""Exception -> one line of message and hint (the table the `hf` CLI keeps), and the exit code."""

from __future__ import annotations

from tpuops.errors import TpuopsError

# Errors that are not ours but that users meet: the hint says what to do next.
HINTS: dict[type[BaseException], str] = {
    FileNotFoundError: "check the path",
    PermissionError: "check the file's permissions",
    ConnectionRefusedError: "is the endpoint up? (check CLOUDSDK_API_ENDPOINT_OVERRIDES_* and the network)",
    TimeoutError: "the network or the remote side is slow; try again",
}


def render_error(err: BaseException) -> tuple[str, int]:
    if isinstance(err, TpuopsError):
        text = err.message + (f" (hint: {err.hint})" if err.hint else "")
        return f"tpuops: error: {_one_line(text)}", err.exit_code
    for kind, hint in HINTS.items():
        if isinstance(err, kind):
            return f"tpuops: error: {_one_line(str(err))} (hint: {hint})", 1
    message = f"{type(err).__name__}: {err}"
    return f"tpuops: error: unexpected {_one_line(message)} (hint: rerun with TPUOPS_DEBUG=1 for the traceback)", 1


def _one_line(text: str) -> str:
    return " ".join(text.split())

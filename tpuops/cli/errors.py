"""Exception -> one line of message and hint (the table the `hf` CLI keeps), and the exit code.

Python's own texts (`[Errno 21] Is a directory: 'x'`, `'utf-8' codec can't decode byte 0x89 ...`, a page of
urllib3 retries) never reach the user: each known kind gets a sentence and a next step.
"""

from __future__ import annotations

import errno
import re

import typer

from tpuops.errors import TpuopsError, UnreachableError

# click's UsageError (Typer may vendor click): the base of every command-line usage error.
USAGE_ERROR: type[Exception] = next(k for k in typer.BadParameter.__mro__ if k.__name__ == "UsageError")
NETWORK_HINT = "check the network connection (DNS, proxy, VPN) or the CLOUDSDK_API_ENDPOINT_OVERRIDES_* endpoints"

# OS errors by errno: what to say about the file, and what to do.
OS_ERRORS: dict[int, tuple[str, str]] = {
    errno.ENOENT: ("does not exist", "check the path"),
    errno.EISDIR: ("is a directory, not a file", "give the path of a file inside it"),
    errno.ENOTDIR: ("is not a directory", "check the path"),
    errno.EACCES: ("cannot be read or written with your permissions", "check the file's owner and mode"),
    errno.EPERM: ("is not permitted", "check the file's owner and mode"),
    errno.ENOSPC: ("cannot be written: the disk is full", "free some space on its disk (`df -h` shows which is "
                                                          "full) and run the command again"),
    errno.EDQUOT: ("cannot be written: your disk quota is used up", "free some space and run the command again"),
    errno.EROFS: ("is on a read-only file system", "choose a writable place"),
}

FULL_DISK = frozenset({errno.ENOSPC, errno.EDQUOT})

# Errors that are not ours but that users meet: the hint says what to do next.
HINTS: dict[type[BaseException], str] = {
    ConnectionRefusedError: "is the endpoint up? (check CLOUDSDK_API_ENDPOINT_OVERRIDES_* and the network)",
    TimeoutError: "the network or the remote side is slow; try again",
}

# Network failures of libraries imported only inside cloud/gcp, known by their class names (importing them
# here would slow every command down); urllib3 and requests wrap them, so the whole chain is searched.
NETWORK_CLASS_NAMES = frozenset({
    "TransportError", "NameResolutionError", "NewConnectionError", "MaxRetryError", "ConnectTimeoutError",
    "ConnectionError", "gaierror",
})


def render_error(err: BaseException) -> tuple[str, int]:
    network = None if isinstance(err, UnreachableError) else _network_failure(err)  # that one says it all
    if network is not None:
        code = err.exit_code if isinstance(err, TpuopsError) else 1
        return f"tpuops: error: {network} (hint: {NETWORK_HINT})", code
    if isinstance(err, TpuopsError):
        text = err.message + (f" (hint: {err.hint})" if err.hint else "")
        return f"tpuops: error: {_one_line(text)}", err.exit_code
    if isinstance(err, OSError) and err.errno in FULL_DISK and err.filename is None:
        return _full_disk_line(), 1
    if isinstance(err, OSError) and err.errno in OS_ERRORS and err.filename is not None:
        what, hint = OS_ERRORS[err.errno]
        return f"tpuops: error: {err.filename} {what} (hint: {hint})", 1
    if isinstance(err, UnicodeDecodeError):
        return (f"tpuops: error: cannot read text: byte {err.object[err.start]:#04x} at offset {err.start} is not "
                f"{err.encoding.upper()} (hint: is it a binary file? specs and scripts must be UTF-8 text)", 1)
    for kind, hint in HINTS.items():
        if isinstance(err, kind):
            return f"tpuops: error: {_one_line(_os_text(err))} (hint: {hint})", 1
    message = f"{type(err).__name__}: {err}"
    return f"tpuops: error: unexpected {_one_line(message)} (hint: rerun with TPUOPS_DEBUG=1 for the traceback)", 1


def _full_disk_line() -> str:
    """A write failed for lack of space, and the error does not say which file: name where tpuops writes."""
    import tempfile

    from tpuops.state import tpuops_home

    return (f"tpuops: error: the disk is full: no space left to write (tpuops writes its state under {tpuops_home()} "
            f"and temporary files under {tempfile.gettempdir()}) (hint: free some space there (`df -h` shows which "
            "disk is full) and run the command again)")


def render_usage_error(err: Exception) -> str:
    """click's 4-line usage block as our one line: what is wrong, and where the command's help is.
    `tpuops` alone (or a group without its command) prints the help itself, as click does."""
    ctx = getattr(err, "ctx", None)
    command = ctx.command_path if ctx is not None else "tpuops"
    if type(err).__name__ == "NoArgsIsHelpError" and ctx is not None:
        return ctx.get_help()
    message = err.format_message().rstrip(".")  # type: ignore[attr-defined]
    message = message[:1].lower() + message[1:]
    where = f"{command.removeprefix('tpuops ')}: " if command != "tpuops" else ""
    return f"tpuops: error: {where}{_one_line(message)} (hint: see `{command} -h`)"


def _network_failure(err: BaseException) -> str | None:
    """'WHAT: cannot reach HOST (why)' when the network failed under `err`, else None."""
    chain = _chain(err)
    failed = next((e for e in chain if _is_network_class(e)), None)
    if failed is None:
        return None
    text = " ".join(str(e) for e in chain)
    host = re.search(r"host='([^']+)'", text)
    where = host.group(1) if host else "the Google APIs"
    if re.search(r"Failed to resolve|Name or service not known|NameResolutionError|nodename nor servname", text):
        why = "its name does not resolve: no network or no DNS?"
    elif "Connection refused" in text:
        why = "connection refused"
    elif re.search(r"timed out|ConnectTimeout", text):
        why = "timed out"
    else:
        why = "network error"
    return f"{_doing(err, chain)}cannot reach {where} ({why})"


def _doing(err: BaseException, chain: list[BaseException]) -> str:
    """'get TPU x: ' from 'get TPU x: TransportError: HTTPSConnectionPool(...)': what we were doing."""
    if not isinstance(err, TpuopsError):
        return ""
    markers = [f": {type(e).__name__}" for e in chain] + [": HTTPConnectionPool", ": HTTPSConnectionPool",
                                                           ": cannot reach", ": ('Connection aborted"]
    cut = min((err.message.find(m) for m in markers if m in err.message), default=-1)
    return f"{_one_line(err.message[:cut])}: " if cut > 0 else ""


def _chain(err: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = err
    while current is not None and current not in seen and len(seen) < 20:
        seen.append(current)
        current = current.__cause__ or current.__context__
        for arg in () if current is not None else getattr(seen[-1], "args", ()):
            if isinstance(arg, BaseException):  # urllib3 keeps the reason in args, not as a cause
                current = arg
    return seen


def _is_network_class(err: BaseException) -> bool:
    return any(kind.__name__ in NETWORK_CLASS_NAMES for kind in type(err).__mro__ if kind.__module__ != "builtins")


def _os_text(err: BaseException) -> str:
    if isinstance(err, OSError) and err.strerror:
        return f"{err.filename}: {err.strerror}" if err.filename else err.strerror
    return str(err)


def _one_line(text: str) -> str:
    return " ".join(text.split())

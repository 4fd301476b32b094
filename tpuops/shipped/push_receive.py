# Receiving a push's payload on a worker: from stdin (framed by the client's payload.py) or from the relay
# worker over HTTP, into the payload file and/or straight into `tar -x`.
#
# Part of the worker agent: shipped.program('push_agent') puts this file's text in place of push_agent.py's import of
# it, so it stays standard-library only, Python 3.8 syntax, with no `from __future__` import.
import contextlib
import hashlib
import os
import subprocess
import sys

from tpuops.shipped.push_protocol import (  # shipped: the agent carries push_protocol.py's text already
    EXIT_CORRUPT,
    EXIT_DISK,
    EXIT_FETCH_FAILED,
    Fail,
)

CHUNK = 1024 * 1024


class Sinks:
    """Where received bytes go: the payload file (`keep`: to serve the other workers, or to check before it is
    unpacked) and/or `tar -x` into `extract_into`, unpacking while the bytes arrive: the payload is then
    written once instead of twice. Only for bytes from the authenticated SSH channel: tar writes into a
    private directory that is used only once the sha256 matched."""

    def __init__(self, keep, extract_into, compressed):
        self.file = open(keep, "wb") if keep else None  # noqa: SIM115  (closed by close or abort)
        self.tar, self.extract_into = None, extract_into
        if extract_into:
            argv = ["tar", "-x", "-f", "-", "-C", extract_into, "--no-same-owner"] + (["-z"] if compressed else [])
            self.tar = subprocess.Popen(argv, stdin=subprocess.PIPE, stderr=subprocess.PIPE)

    def write(self, chunk):
        if self.file is not None:
            self.file.write(chunk)
        if self.tar is not None:
            try:
                self.tar.stdin.write(chunk)
            except BrokenPipeError:
                self.close()  # tar gave up: say why
                raise Fail(EXIT_DISK, "extracting failed") from None

    def close(self):
        if self.file is not None:
            self.file.close()
            self.file = None
        if self.tar is not None:
            tar, self.tar = self.tar, None
            with contextlib.suppress(BrokenPipeError):
                tar.stdin.close()
            error = tar.stderr.read()
            if tar.wait() != 0:
                raise tar_failed(error, tar.returncode, self.extract_into)

    def abort(self):
        if self.tar is not None:
            self.tar.kill()
            self.tar.wait()
            self.tar = None
        if self.file is not None:
            self.file.close()
            self.file = None


def truncated(size):
    return Fail(EXIT_CORRUPT, f"payload truncated after {size} bytes (the push was interrupted)")


def receive_stdin(keep, extract_into):
    """`TPUOPS-STREAM tar|gzip raw|framed`, then the payload: raw, to the end of stdin (where `tar` can read it
    itself); framed, in chunks each after its length in hex on a line, then `0 SIZE`. SSH delivers what was
    sent or nothing (its MAC): the framing, or tar's end of archive and the agent's check of the files, tell a
    complete payload from one cut short."""
    header = read_line(0).split()
    if len(header) != 3 or header[0] != b"TPUOPS-STREAM":
        raise Fail(EXIT_CORRUPT, "no payload received (the push was interrupted)")
    compressed, framed = header[1] == b"gzip", header[2] == b"framed"
    if not framed and extract_into and not keep:
        untar_stdin(extract_into, compressed)
        return
    sinks = Sinks(keep, extract_into, compressed)
    try:
        (copy_framed if framed else copy_to_end)(sys.stdin.buffer, sinks)
        sinks.close()
    finally:
        sinks.abort()


def read_line(fd):
    """One line read a byte at a time, so that nothing after it is taken from the file descriptor."""
    line = b""
    while not line.endswith(b"\n") and len(line) < 200:
        byte = os.read(fd, 1)
        if not byte:
            break
        line += byte
    return line


def untar_stdin(extract_into, compressed):
    argv = ["tar", "-x", "-f", "-", "-C", extract_into, "--no-same-owner"] + (["-z"] if compressed else [])
    done = subprocess.run(argv, stdin=0, stderr=subprocess.PIPE)
    if done.returncode != 0:
        raise tar_failed(done.stderr, done.returncode, extract_into)


def tar_failed(stderr, returncode, where):
    """tar's first complaint says why; its last line only that it gave up. A full disk is said in so many words
    (tar's own `Wrote only 1536 of 10240 bytes` does not), and a payload that ended early is its own case: the
    push was interrupted."""
    lines = [line for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    cut = [line for line in lines if "unexpected eof" in line.lower() or "unexpected end of file" in line.lower()]
    if cut:
        return Fail(EXIT_CORRUPT, f"payload truncated (the push was interrupted): {cut[0]}")
    detail = lines[0] if lines else f"tar exit {returncode}"
    try:
        disk = os.statvfs(where)
        if disk.f_bavail * disk.f_frsize < 1024 * 1024 and "No space left" not in detail:
            detail = f"No space left on device ({detail})"
    except OSError:
        pass
    return Fail(EXIT_DISK, "extracting failed: " + detail)


def copy_to_end(stream, sinks):
    while True:
        chunk = stream.read(CHUNK)
        if not chunk:
            return
        sinks.write(chunk)


def copy_framed(stream, sinks):
    size = 0
    while True:
        fields = stream.readline(200).split()
        if not fields:
            raise truncated(size)
        left = int(fields[0], 16)
        if left == 0:
            if fields[1:] != [str(size).encode()]:
                raise Fail(EXIT_CORRUPT, "payload corrupt (its size differs from what was sent)")
            return
        while left:
            chunk = stream.read(min(CHUNK, left))
            if not chunk:
                raise truncated(size)
            sinks.write(chunk)
            left -= len(chunk)
            size += len(chunk)


def receive_url(target, url, size, digest):
    try:
        from urllib.request import urlopen

        # short: a firewall that drops packets must not hold the push up long before the direct copy
        with urlopen(url, timeout=15) as response:
            copy_checked(response, target, size, digest)
    except Fail:
        raise
    except Exception as err:  # noqa: BLE001  any fetch problem means: send it directly instead
        raise Fail(EXIT_FETCH_FAILED, f"fetch from the relay worker failed: {err}") from None


def copy_checked(source, target, size, digest):
    hasher, left = hashlib.sha256(), size
    with open(target, "wb") as out:
        while left:
            chunk = source.read(min(CHUNK, left))
            if not chunk:
                raise truncated(size - left)
            hasher.update(chunk)
            out.write(chunk)
            left -= len(chunk)
    if hasher.hexdigest() != digest:
        raise Fail(EXIT_CORRUPT, "payload corrupt (sha256 mismatch)")

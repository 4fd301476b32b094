# The worker side of `tpuops push`, run as `python3 -c <this file> ACTION ARGS...` on every worker.
#
# It runs on whatever python3 the worker has (TPU VM images ship 3.8+), so it uses only the standard
# library and avoids newer syntax. It is not imported by tpuops itself; sync.py sends its text.
#
# Layout for a destination DEST (e.g. ~/tpuops/NAME/code):
#   DEST                          -> symlink to .tpuops-trees/<basename>/<tree id>
#   <parent>/.tpuops-trees/<basename>/<id>/        one complete tree
#   <parent>/.tpuops-trees/<basename>/<id>.json    its manifest
# A new tree is built beside the current one (changed files from the payload, unchanged ones hard-linked
# from the current tree), renamed into place, and only then DEST is switched with one atomic rename of a
# symlink. An interrupted push therefore leaves DEST on the old tree or the new one, never a mix.
#
# Payload: a tar (plain, or a series of gzip members) whose first member is delta.json (base tree, new tree id,
# changed/new manifest rows, deleted paths) and whose other members are files/<path> (changed content only),
# read from stdin (framed, see receive_stdin and the client's payload.py) or fetched over HTTP from the
# worker that received it (the relay). DEST is not touched before the whole payload is there (from stdin: its
# framing says so; from the relay: its sha256 matches). SIGHUP and SIGTERM (the client's session ended) end it
# through its clean-up, like an error.
#
# Exit codes, the manifest format and the tree id are defined once, in push_protocol.py; sync.py ships that
# file's text in place of the import below. Errors go to stderr as one line.
import contextlib
import json
import os
import shutil
import sys
import tarfile

from tpuops.shipped.push_protocol import (  # shipped: replaced by push_protocol.py's text
    EXIT_BASE_UNUSABLE,
    EXIT_CORRUPT,
    EXIT_DISK,
    EXIT_NOT_OURS,
    EXIT_OTHER,
    Fail,
    manifest_text,
    tree_id,
)
from tpuops.shipped.push_receive import (  # shipped: replaced by push_receive.py's text
    receive_stdin,
    receive_url,
    tar_failed,
)
from tpuops.shipped.push_relay import (  # shipped: replaced by push_relay.py's text
    Relay,
)

CHUNK = 1024 * 1024


def paths(dest):
    dest = os.path.abspath(os.path.expanduser(dest))
    parent, base = os.path.split(dest)
    trees = os.path.join(parent, ".tpuops-trees", base)
    return dest, parent, trees


def current_tree(dest):
    """The tree id DEST points at, None when DEST does not exist; Fail(EXIT_NOT_OURS) when DEST is not ours."""
    if os.path.islink(dest):
        return os.path.basename(os.readlink(dest))
    if not os.path.lexists(dest):
        return None
    if os.path.isdir(dest) and not os.listdir(dest):
        return None  # an empty directory (made by hand or by a setup script) is taken over
    raise Fail(EXIT_NOT_OURS,
               f"{dest} exists and was not created by tpuops push; move it away or choose another destination")


def action_manifest(dest, tree):
    _, _, trees = paths(dest)
    with open(os.path.join(trees, tree + ".json")) as handle:
        sys.stdout.write(handle.read())


def safe_join(root, rel):
    full = os.path.normpath(os.path.join(root, rel))
    if rel.startswith("/") or not full.startswith(root + os.sep):
        raise Fail(EXIT_CORRUPT, f"payload names a path outside the tree: {rel!r}")
    return full


def new_manifest(delta, base_manifest):
    """Base manifest + delta (changed/new rows, deleted paths) -> the new manifest, checked by its hash."""
    entries = {}
    if base_manifest is not None:
        entries = {row[0]: row for row in base_manifest["files"]}
    for path in delta["delete"]:
        entries.pop(path, None)
    for row in delta["set"]:
        entries[row[0]] = row
    rows = [entries[path] for path in sorted(entries)]
    if tree_id(manifest_text(rows)) != delta["tree"]:
        raise Fail(EXIT_BASE_UNUSABLE, "the current tree differs from what the client expected; a full push is needed")
    return {"version": 1, "files": rows}


def extract_with_tar(payload, work):
    """GNU tar writes thousands of small files several times faster than tarfile (C, no per-file Python).
    The payload is trusted: it came over the authenticated SSH channel, or from the relay with its sha256
    (given over SSH) checked."""
    import subprocess

    done = subprocess.run(["tar", "-x", "-f", payload, "-C", work, "--no-same-owner"], capture_output=True)
    if done.returncode != 0:
        raise tar_failed(done.stderr, done.returncode, work)


def extract_with_python(payload, work):
    with tarfile.open(payload, "r:*") as tar:  # r:* reads a series of gzip members as one archive
        for member in tar:
            if not member.isfile() or not (member.name == "delta.json" or member.name.startswith("files/")):
                raise Fail(EXIT_CORRUPT, f"unexpected payload member {member.name!r}")
            target = safe_join(work, member.name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with tar.extractfile(member) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out, CHUNK)
            os.chmod(target, member.mode & 0o755)


def build_tree(work, base_dir, base_manifest):
    """`work` holds the unpacked payload (delta.json, files/...): complete files/ into the new tree."""
    try:
        with open(os.path.join(work, "delta.json")) as handle:
            delta = json.load(handle)
    except (OSError, ValueError):
        raise Fail(EXIT_CORRUPT, "payload has no delta") from None
    if delta["base"] is not None and base_manifest is None:
        raise Fail(EXIT_BASE_UNUSABLE, "the base tree is gone; a full push is needed")
    manifest = new_manifest(delta, base_manifest)
    entries = {entry[0]: entry for entry in manifest["files"]}
    written = set(delta["sent"])
    stage = os.path.join(work, "files")
    os.makedirs(stage, exist_ok=True)
    for rel in written:
        entry = entries.get(rel)
        target = safe_join(stage, rel)
        if entry is None or not os.path.isfile(target) or os.path.getsize(target) != entry[1]:
            raise Fail(EXIT_CORRUPT, f"payload incomplete: {rel} missing or of the wrong size")
    for rel, entry in sorted(entries.items()):
        if rel in written:
            continue
        target = safe_join(stage, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        if entry[4] is not None:
            os.symlink(entry[4], target)
            continue
        source = os.path.join(base_dir, rel) if base_dir else None
        if source is None or not os.path.isfile(source) or os.path.getsize(source) != entry[1]:
            raise Fail(EXIT_BASE_UNUSABLE, f"the current tree lacks {rel}; a full push is needed")
        os.link(source, target)  # unchanged: share the bytes with the current tree
    return manifest, stage


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(data, handle)
    os.replace(tmp, path)


def switch(dest, parent, trees, tree):
    os.makedirs(parent, exist_ok=True)
    if os.path.isdir(dest) and not os.path.islink(dest):
        os.rmdir(dest)  # an empty directory (current_tree checked it)
    link = os.path.relpath(os.path.join(trees, tree), parent)
    tmp = f"{dest}.tpuops-new-{os.getpid()}"
    os.symlink(link, tmp)
    os.replace(tmp, dest)  # the one atomic step: readers see the old tree or the new one


TREE_ID_LENGTH = 24
LOCK_WAIT_SECONDS = 600


def lock(trees):
    """Serialise pushes (and the background clean-up of the previous one) to one destination.

    The lock belongs to the open file, so a forked cleaner keeps holding it after this process exits."""
    import fcntl
    import time

    fd = os.open(os.path.join(trees, ".lock"), os.O_CREAT | os.O_RDWR, 0o600)
    deadline = time.time() + LOCK_WAIT_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            if time.time() > deadline:
                raise Fail(EXIT_OTHER, "another push to this destination is still running on the worker") from None
            time.sleep(0.1)


def pid_alive(name):
    try:
        os.kill(int(name.rsplit("-", 1)[1]), 0)
    except (ValueError, IndexError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def clean(trees, keep):
    """Remove trees other than `keep`, and leftovers of interrupted pushes whose process is gone."""
    for name in os.listdir(trees):
        stem = name[:-5] if name.endswith(".json") else name
        is_tree = len(stem) == TREE_ID_LENGTH and all(c in "0123456789abcdef" for c in stem)
        leftover = name.startswith((".partial-", ".payload-")) and not pid_alive(name)
        if (is_tree and stem != keep) or leftover:
            path = os.path.join(trees, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.unlink(path)


def clean_in_background(trees, keep):
    """Deleting the old tree (thousands of unlinks) need not hold up the push: a detached child does it."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        clean(trees, keep)
        return
    if pid:
        return
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # let go of the SSH session's pipes, so the session can end now
            os.dup2(devnull, fd)
        clean(trees, keep)
    finally:
        os._exit(0)


def action_apply(dest, base, new, source, payload, serving, after_receive=None):
    """Receive the payload, build the new tree, switch DEST to it. The payload is kept in the file `payload` (the
    caller removes it) when this worker serves it or it came from the relay; from stdin, `tar` unpacks it as it
    arrives, into a private directory used only once the whole payload has arrived."""
    dest, parent, trees = paths(dest)
    current = current_tree(dest)
    final = os.path.join(trees, new)
    work = os.path.join(trees, f".partial-{new}-{os.getpid()}")
    try:
        build = not os.path.isdir(final)
        streaming = build and source[0] == "stdin" and shutil.which("tar") is not None
        if build:
            os.mkdir(work)
        keep = payload if serving or (build and not streaming) else None
        if source[0] == "stdin":
            receive_stdin(keep, work if streaming else None)
        else:
            receive_url(payload, *source[1:])
        if after_receive is not None:
            after_receive()  # the relay starts serving now, so the others unpack while we do
        if build:
            if not streaming:
                (extract_with_tar if shutil.which("tar") else extract_with_python)(payload, work)
            base_dir = base_manifest = None
            if base != "-" and base == current and os.path.isdir(os.path.join(trees, base)):
                base_dir = os.path.join(trees, base)
                with open(base_dir + ".json") as handle:
                    base_manifest = json.load(handle)
            manifest, stage = build_tree(work, base_dir, base_manifest)
            write_json(final + ".json", manifest)
            os.rename(stage, final)
        switch(dest, parent, trees, new)
    except OSError as err:
        raise Fail(EXIT_DISK, f"writing {err.filename or dest} failed: {err.strerror or err}") from None
    finally:
        if os.path.isdir(work):
            shutil.rmtree(work, ignore_errors=True)


def apply_main(dest, base, new, options):
    source, relay = ("stdin",), None
    trees = paths(dest)[2]
    os.makedirs(trees, exist_ok=True)
    lock(trees)
    payload = os.path.join(trees, f".payload-{os.getpid()}")
    # --fetch URL SIZE SHA256 and --serve HOST TOKEN SECONDS, either or both (a slice's first worker fetches
    # the payload from the seed and serves it on to the rest of its slice)
    while options:
        if options[0] == "--fetch":
            source, options = ("url", options[1], int(options[2]), options[3]), options[4:]
        elif options[0] == "--serve":
            relay, options = Relay(payload, options[1], options[2], float(options[3])), options[4:]
        else:
            raise Fail(EXIT_OTHER, f"unknown option {options[0]}")
    try:
        try:
            action_apply(dest, base, new, source, payload, relay is not None, relay.start if relay else None)
        finally:
            if relay is not None:
                relay.wait_and_stop()  # even if our own apply failed, the others may be fetching
        print(json.dumps({"tree": new}), flush=True)
    finally:
        if os.path.exists(payload):
            os.unlink(payload)
    clean_in_background(trees, new)


class Hangup(Exception):
    pass


def hang_up(signum, frame):
    raise Hangup(f"stopped by signal {signum} (the push was interrupted)")


def main(argv):
    import signal

    for signum in (signal.SIGHUP, signal.SIGTERM):  # unwind through the finally blocks: no payload left behind
        signal.signal(signum, hang_up)
    action = argv[0]
    try:
        if action == "manifest":  # (which tree DEST holds: push_state.sh answers without Python)
            action_manifest(argv[1], argv[2])
        elif action == "apply":
            apply_main(argv[1], argv[2], argv[3], argv[4:])
        else:
            raise Fail(EXIT_OTHER, f"unknown action {action!r}")
    except Fail as err:
        sys.stderr.write(f"tpuops-push: {err}\n")
        return err.code
    except Hangup as err:
        sys.stderr.write(f"tpuops-push: {err}\n")
        return EXIT_OTHER
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

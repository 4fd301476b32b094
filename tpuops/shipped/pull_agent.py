"""The worker side of `tpuops pull`, shipped as text (`python3 -S -c SOURCE ACTION ROOT`): standard library only.

`list ROOT`: one JSON line saying what ROOT is (`{"root": "dir"|"file", "name": BASENAME}`), then one JSON line per
entry under it, symlinks as links (never followed): path relative to ROOT, kind (f file, d directory, l link), size,
mtime in ns, mode bits, link target.
`read ROOT`: stdin is a JSON list of [path, offset, length]; for each, stdout gets an 8-byte big-endian signed count
and that many bytes of the file from offset (-1 and no bytes: it cannot be read as a regular file).

The client asks only for names this listing gave; names that climb out of ROOT are refused here too.
"""

import json
import os
import stat
import struct
import sys

EXIT_USAGE = 2
EXIT_MISSING = 3
KINDS = {stat.S_IFREG: "f", stat.S_IFDIR: "d", stat.S_IFLNK: "l"}


def root_of(text):
    return os.path.abspath(os.path.expanduser(text))


def describe(path, rel, info):
    kind = KINDS.get(stat.S_IFMT(info.st_mode))
    if kind is None:
        return None  # sockets, fifos, devices: nothing to copy
    entry = {"p": rel, "t": kind, "s": info.st_size if kind == "f" else 0, "m": info.st_mtime_ns,
             "x": stat.S_IMODE(info.st_mode)}
    if kind == "l":
        entry["l"] = os.readlink(path)
    return entry


def action_list(root):
    try:
        info = os.stat(root)  # ROOT itself is followed (push makes ~/tpuops/NAME/code a symlink); what is in it, not
    except FileNotFoundError:
        sys.stderr.write(f"tpuops-pull: {root} does not exist\n")
        return EXIT_MISSING
    out = sys.stdout
    is_dir = stat.S_ISDIR(info.st_mode)
    out.write(json.dumps({"root": "dir" if is_dir else "file", "name": os.path.basename(root)}) + "\n")
    if not is_dir:
        entry = describe(root, "", info)
        if entry is not None:
            out.write(json.dumps(entry) + "\n")
        return 0
    for directory, dirs, files in os.walk(root):  # symlinked directories are listed, not entered
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(directory, name)
            try:
                entry = describe(path, os.path.relpath(path, root), os.lstat(path))
            except OSError:
                continue  # gone since the directory was read
            if entry is not None:
                out.write(json.dumps(entry) + "\n")
    return 0


def inside(root, rel):
    if not rel:
        return root
    full = os.path.normpath(os.path.join(root, rel))
    if os.path.isabs(rel) or not full.startswith(root.rstrip("/") + "/"):
        return None
    return full


def read_part(path, offset, length, follow):
    try:
        handle = os.open(path, os.O_RDONLY | (0 if follow else getattr(os, "O_NOFOLLOW", 0)))
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            return None
        os.lseek(handle, offset, os.SEEK_SET)
        chunks, left = [], length
        while left > 0:
            data = os.read(handle, min(left, 1 << 20))
            if not data:
                break
            chunks.append(data)
            left -= len(data)
        return b"".join(chunks)
    finally:
        os.close(handle)


def action_read(root):
    wanted = json.loads(sys.stdin.read() or "[]")
    out = sys.stdout.buffer
    for rel, offset, length in wanted:
        path = inside(root, rel)
        data = read_part(path, int(offset), int(length), follow=not rel) if path is not None else None
        if data is None:
            out.write(struct.pack(">q", -1))
        else:
            out.write(struct.pack(">q", len(data)))
            out.write(data)
    out.flush()
    return 0


def main(argv):
    if len(argv) != 2 or argv[0] not in ("list", "read"):
        sys.stderr.write("usage: list|read ROOT\n")
        return EXIT_USAGE
    root = root_of(argv[1])
    return action_list(root) if argv[0] == "list" else action_read(root)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Runs on the guard VM before tpuops is installed there (so: the standard library only, shipped as text inside
the startup script): mirrors the bundle `guard up` staged under gs://BUCKET/PREFIX/ into the guard's home, with
the VM's own token from the metadata server (the part `metadata_token.py`, inlined by shipped.program).

An object is fetched only when its generation differs from the one fetched last time (kept in
`.bundle-generations.json`), so a reboot does not put back a stale copy over what the guard wrote since, and a
bundle staged again (`guard up` after a change of spec or code) does replace it. It waits, within --wait seconds,
until a wheel is staged (wheels/CURRENT names it): the VM may boot before `guard up` has staged the bundle.

    python3 fetch_bundle.py BUCKET PREFIX DEST [--wait SECONDS]

Endpoints: GCE_METADATA_HOST and STORAGE_EMULATOR_HOST, as Google's own libraries read them.
"""

import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from tpuops.shipped.metadata_token import (  # shipped: replaced by metadata_token.py's text
    MetadataToken,
)

MANIFEST = ".bundle-generations.json"
EXECUTABLES = ".executables"  # written by guard/bundle.py
CURRENT = "wheels/CURRENT"  # names the wheel to install; written after the wheel itself
TIMEOUT = 30


def storage_base():
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator:
        return emulator if "://" in emulator else "http://" + emulator
    return "https://storage.googleapis.com"


def get(url, token):
    request = urllib.request.Request(url, headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(request, timeout=TIMEOUT) as answer:
        return answer.read()


def list_objects(bucket, prefix, token):
    """[(name relative to prefix, generation)] of every object under the prefix."""
    found, page = [], None
    while True:
        query = {"prefix": prefix, "fields": "items(name,generation),nextPageToken"}
        if page:
            query["pageToken"] = page
        url = "{}/storage/v1/b/{}/o?{}".format(storage_base(), urllib.parse.quote(bucket, safe=""),
                                               urllib.parse.urlencode(query))
        answer = json.loads(get(url, token).decode())
        for item in answer.get("items", []):
            found.append((item["name"][len(prefix):], str(item["generation"])))
        page = answer.get("nextPageToken")
        if not page:
            return found


def safe_path(dest, relative):
    """Where an object goes under dest; None for a name that would leave it (.., absolute, empty)."""
    parts = relative.split("/")
    if not relative or relative.endswith("/") or any(part in ("", ".", "..") for part in parts):
        return None
    return os.path.join(dest, *parts)


def download(bucket, prefix, relative, generation, target, token):
    url = "{}/storage/v1/b/{}/o/{}?alt=media&generation={}".format(
        storage_base(), urllib.parse.quote(bucket, safe=""), urllib.parse.quote(prefix + relative, safe=""),
        generation)
    data = get(url, token)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    partial = target + ".partial"
    with open(partial, "wb") as handle:
        handle.write(data)
    os.replace(partial, target)


def load_manifest(dest):
    try:
        with open(os.path.join(dest, MANIFEST)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def save_manifest(dest, manifest):
    partial = os.path.join(dest, MANIFEST + ".partial")
    with open(partial, "w") as handle:
        json.dump(manifest, handle, sort_keys=True)
    os.replace(partial, os.path.join(dest, MANIFEST))


def mirror(bucket, prefix, dest, token):
    """Fetch what changed, remove what an earlier fetch brought and the bundle no longer holds (never a file
    the guard wrote itself), and mark the files `.executables` names; returns (objects listed, names fetched)."""
    objects = list_objects(bucket, prefix, token)
    manifest = load_manifest(dest)
    fetched = []
    for relative, generation in objects:
        target = safe_path(dest, relative)
        if target is None:
            continue
        if manifest.get(relative) == generation and os.path.exists(target):
            continue
        download(bucket, prefix, relative, generation, target, token)
        manifest[relative] = generation
        fetched.append(relative)
    listed = {relative for relative, _ in objects}
    for relative in [name for name in manifest if name not in listed]:
        target = safe_path(dest, relative)
        if target is not None and os.path.isfile(target):
            os.remove(target)
        del manifest[relative]
    save_manifest(dest, manifest)
    mark_executables(dest)
    return objects, fetched


def mark_executables(dest):
    """GCS keeps no file modes: the bundle lists its executable files, so a relaunch pushes them as such."""
    try:
        with open(os.path.join(dest, EXECUTABLES)) as handle:
            names = [line.strip() for line in handle if line.strip()]
    except OSError:
        return
    for relative in names:
        target = safe_path(dest, relative)
        if target is not None and os.path.isfile(target):
            os.chmod(target, os.stat(target).st_mode | 0o100)


def main(argv):
    args = argv[1:]
    wait = 0.0
    if "--wait" in args:
        at = args.index("--wait")
        wait = float(args[at + 1])
        del args[at:at + 2]
    if len(args) != 3:
        sys.stderr.write("usage: fetch_bundle.py BUCKET PREFIX DEST [--wait SECONDS]\n")
        return 2
    bucket, prefix, dest = args
    prefix = prefix.rstrip("/") + "/"
    os.makedirs(dest, exist_ok=True)
    deadline, pause = time.time() + wait, 2.0
    token = MetadataToken()
    while True:
        problem = None
        try:
            objects, fetched = mirror(bucket, prefix, dest, token.get())
            for name in fetched:
                print("fetched " + name)
            if any(name == CURRENT for name, _ in objects):
                return 0
            problem = f"no wheel staged under gs://{bucket}/{prefix}{CURRENT} yet"
        except (OSError, ValueError, KeyError) as err:  # URLError and HTTPError are OSErrors
            problem = f"{type(err).__name__}: {err}"
        if time.time() >= deadline:
            sys.stderr.write("fetch_bundle: " + problem + "\n")
            return 1
        time.sleep(min(pause, max(deadline - time.time(), 0.1)))
        pause = min(pause * 2, 60.0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

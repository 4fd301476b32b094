# The host and the cloud as the autostop agent sees them: files, what is alive on the worker, HTTP, the
# metadata server's token and the backends that delete a TPU (TPU REST API, Compute REST API, local simulator).
#
# Part of the agent: shipped.program('autostop_agent') puts this file's text in place of autostop_agent.py's import of
# it, so it stays standard-library only, Python 3.8 syntax, with no `from __future__` import.

import contextlib
import errno
import fnmatch
import json
import os
import shutil
import signal
import sys
import time

try:
    from http.client import HTTPException
    from urllib.error import HTTPError, URLError
    from urllib.parse import quote
    from urllib.request import Request, urlopen
except ImportError:  # pragma: no cover  (python 2 is not supported; keep the message readable)
    sys.exit("tpuops autostop needs python3")

from tpuops.shipped.metadata_token import (  # shipped: autostop_agent.py carries metadata_token.py's text
    MetadataToken,
)

CLUSTER_LABEL = "tpuops-cluster"
DELETE_ROLE = "roles/tpu.admin"
COMPUTE_DELETE_ROLE = "roles/compute.instanceAdmin.v1"
LOG_LIMIT_BYTES = 1024 * 1024
START_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0
HTTP_TIMEOUT = 30.0
MAX_BACKOFF = 900.0


class Stopped(Exception):
    pass


class DeleteFailed(Exception):
    def __init__(self, status, message, hint=""):
        Exception.__init__(self, message)
        self.status = status
        self.message = message
        self.hint = hint


class Gone(Exception):
    pass


# ----------------------------------------------------------------------------------------------- files


class Paths:
    def __init__(self, base):
        self.base = os.path.abspath(os.path.expanduser(base))
        self.dir = os.path.join(self.base, "autostop")
        self.agent = os.path.join(self.dir, "agent.py")
        self.config = os.path.join(self.dir, "config.json")
        self.status = os.path.join(self.dir, "status.json")
        self.lock = os.path.join(self.dir, "lock")
        self.pid = os.path.join(self.dir, "pid")
        self.output = os.path.join(self.dir, "agent.out")
        self.log = os.path.join(self.base, "autostop.log")
        self.keep_alive = os.path.join(self.base, "keep-alive")
        self.runs = os.path.join(self.base, "runs")


def write_json(path, data):
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as handle:
        json.dump(data, handle, indent=1, sort_keys=True)
    os.rename(tmp, path)


def read_json(path, default=None):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def iso(seconds):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def home_path(pattern):
    # A leading ~/ means this worker's home (the local simulator keeps its fake devices there).
    return os.path.join(os.path.expanduser("~"), pattern[2:]) if pattern.startswith("~/") else pattern


# --------------------------------------------------------------------------------------- what is alive


def live_runs(paths):
    """Run ids whose process group still exists and that recorded no exit code."""
    alive = []
    try:
        names = sorted(os.listdir(paths.runs))
    except OSError:
        return alive
    for run in names:
        run_dir = os.path.join(paths.runs, run)
        if os.path.exists(os.path.join(run_dir, "exit_code")):
            continue
        try:
            with open(os.path.join(run_dir, "pid")) as handle:
                pgid = int(handle.read().strip())
        except (OSError, ValueError):
            continue
        if group_exists(pgid):
            alive.append(run)
    return alive


def group_exists(pgid):
    try:
        os.killpg(pgid, 0)
    except OSError as err:
        return err.errno == errno.EPERM  # someone else's group, but alive
    return True


def device_holders(device_glob):
    """(pid, device) for every process holding a file matching the glob (as free_tpu.sh looks for them)."""
    pattern = home_path(device_glob)
    found = []
    me = os.getpid()
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        fd_dir = os.path.join("/proc", pid, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if fnmatch.fnmatchcase(target, pattern):
                found.append((int(pid), target))
                break
    return found


# ---------------------------------------------------------------------------------------------- HTTP


def http(method, url, headers=None, body=None, timeout=HTTP_TIMEOUT):
    """(status, parsed JSON or text); HTTP errors are answers, not exceptions. URLError propagates."""
    data = None
    headers = dict(headers or {})
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    request = Request(url, data=data, headers=headers, method=method)
    try:
        response = urlopen(request, timeout=timeout)
        status, raw = response.status, response.read()
        response.close()
    except HTTPError as err:
        status, raw = err.code, err.read()
    return status, parsed(raw)


def parsed(raw):
    """An answer's body: its JSON, else its text."""
    try:
        return json.loads(raw.decode("utf-8", "replace") or "null")
    except ValueError:
        return raw.decode("utf-8", "replace")


def error_message(answer):
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        return str(answer["error"].get("message", answer["error"]))
    return str(answer)[:300]


class Metadata:
    """The VM's metadata server: its default service account's token (metadata_token.py) and email."""

    def __init__(self, host):
        self.token = MetadataToken(host)

    def bearer(self):
        try:
            return {"Authorization": "Bearer " + self.token.get()}
        except HTTPError as err:  # an answer, not an outage: the failure says what it was
            answer = parsed(err.read())
            raise DeleteFailed(err.code, f"metadata server gave no token: {error_message(answer)}") from None
        except (KeyError, ValueError) as err:
            raise DeleteFailed(200, f"metadata server gave no token: {type(err).__name__}: {err}") from None

    def email(self):
        try:
            status, answer = http("GET", self.token.url("email"), {"Metadata-Flavor": "Google"}, timeout=5)
        except (URLError, OSError):
            return "the TPU's service account"
        return answer if status == 200 and isinstance(answer, str) else "the TPU's service account"


# ------------------------------------------------------------------------------------------- backends


class GcpTpu:
    """Deletes the TPU through the TPU v2 REST API and writes the record through the GCS JSON API."""

    def __init__(self, config):
        self.config = config
        self.metadata = Metadata(config.get("metadata_host") or os.environ.get("GCE_METADATA_HOST")
                                 or "metadata.google.internal")
        endpoint = (config.get("tpu_endpoint") or "https://tpu.googleapis.com").rstrip("/")
        self.location = "{}/v2/projects/{}/locations/{}".format(endpoint, config["project"], config["zone"])
        self.storage = (config.get("storage_endpoint") or "https://storage.googleapis.com").rstrip("/")

    def labels(self):
        status, answer = http("GET", "{}/nodes/{}".format(self.location, self.config["node"]), self.metadata.bearer())
        if status == 404:
            raise Gone("node {} no longer exists".format(self.config["node"]))
        if status != 200:
            raise DeleteFailed(status, "reading node {} failed: {}".format(self.config["node"], error_message(answer)),
                               self._hint(status))
        return answer.get("labels") or {}

    def delete(self):
        queued = self.config.get("queued")
        if queued:
            url = f"{self.location}/queuedResources/{queued}?force=true"
        else:
            url = "{}/nodes/{}".format(self.location, self.config["node"])
        status, answer = http("DELETE", url, self.metadata.bearer())
        if status == 404:
            raise Gone("%s no longer exists" % (queued or self.config["node"]))
        if status != 200:
            raise DeleteFailed(status, f"delete failed: HTTP {status}: {error_message(answer)}",
                               self._hint(status))
        return answer.get("name", "") if isinstance(answer, dict) else ""

    def write_record(self, record):
        bucket = self.config.get("bucket")
        if not bucket:
            return None
        name = ".tpuops/{}/autostop.json".format(self.config["cluster"])
        url = "{}/upload/storage/v1/b/{}/o?uploadType=media&name={}".format(self.storage, quote(bucket, safe=""),
                                                                     quote(name, safe=""))
        # text/plain: a JSON content type on a media upload makes gcp-storage-emulator parse the body as
        # upload metadata; GCS itself serves the object the same either way.
        try:
            status, answer = http("POST", url, dict(self.metadata.bearer(), **{"Content-Type": "text/plain"}),
                                  json.dumps(record, indent=1).encode())
        except (DeleteFailed, URLError, OSError, HTTPException) as err:
            status, answer = getattr(err, "status", None), str(err)
        if status != 200:
            return f"record upload to gs://{bucket}/{name} failed: HTTP {status}: {error_message(answer)}"
        return None

    def _hint(self, status):
        if status in (401, 403):
            return "grant {} to {} on project {} (and give the TPU the cloud-platform scope)".format(
                DELETE_ROLE, self.metadata.email(), self.config["project"])
        return ""


class GcpComputeTpu(GcpTpu):
    """A TPU made by Compute Engine: one instance, or a slice's managed instance group, deleted through the Compute
    REST API with the VM's own token. Deleting a group deletes its VMs (this one too), so the slice's instance
    template and workload policy, which cost nothing, stay for `tpuops down` (or the next `up`) to delete."""

    def __init__(self, config):
        GcpTpu.__init__(self, config)
        endpoint = (config.get("compute_endpoint") or "https://compute.googleapis.com").rstrip("/")
        self.project_url = "{}/compute/v1/projects/{}".format(endpoint, config["project"])
        what = "instanceGroupManagers" if config.get("group") else "instances"
        self.url = "{}/zones/{}/{}/{}".format(self.project_url, config["zone"], what, config["node"])

    def labels(self):
        answer = self._get(self.url, "{} {}".format(self._what(), self.config["node"]), gone_if_missing=True)
        if not self.config.get("group"):
            return answer.get("labels") or {}
        # A group carries no labels: its template's are its VMs'.
        template = answer.get("instanceTemplate", "").rsplit("/", 1)[-1]
        found = self._get(f"{self.project_url}/global/instanceTemplates/{template}",
                          "instance template " + template)
        return (found.get("properties") or {}).get("labels") or {}

    def delete(self):
        status, answer = http("DELETE", self.url, self.metadata.bearer())
        if status == 404:
            raise Gone("{} {} no longer exists".format(self._what(), self.config["node"]))
        if status != 200:
            raise DeleteFailed(status, f"delete failed: HTTP {status}: {error_message(answer)}", self._hint(status))
        return answer.get("name", "") if isinstance(answer, dict) else ""

    def _get(self, url, what, gone_if_missing=False):
        status, answer = http("GET", url, self.metadata.bearer())
        if status == 404 and gone_if_missing:
            raise Gone(what + " no longer exists")
        if status != 200 or not isinstance(answer, dict):
            raise DeleteFailed(status, f"reading {what} failed: {error_message(answer)}", self._hint(status))
        return answer

    def _what(self):
        return "instance group" if self.config.get("group") else "VM"

    def _hint(self, status):
        if status in (401, 403):
            return "grant {} to {} on project {} (and give the VMs the cloud-platform scope)".format(
                COMPUTE_DELETE_ROLE, self.metadata.email(), self.config["project"])
        return ""


class LocalTpu:
    """The local simulator: the node is a JSON record, its workers directories, its bucket a directory."""

    def __init__(self, config):
        self.config = config
        self.local = config["local"]

    def labels(self):
        record = read_json(self.local["node_record"])
        if record is None:
            raise Gone("node {} no longer exists".format(self.config["node"]))
        return record.get("labels") or {}

    def delete(self):
        stop_processes_with_home_under(self.local["workers_dir"])
        shutil.rmtree(self.local["workers_dir"], ignore_errors=True)
        for record in (self.local.get("queued_record"), self.local["node_record"]):
            if record and os.path.exists(record):
                os.unlink(record)
        return "local"

    def write_record(self, record):
        directory = self.local.get("record_dir")
        if not directory:
            return None
        try:
            if not os.path.isdir(directory):
                os.makedirs(directory)
            write_json(os.path.join(directory, "autostop.json"), record)
        except OSError as err:
            return f"record write to {directory} failed: {err}"
        return None


def stop_processes_with_home_under(home):
    """What deleting a simulated TPU does to its workers: TERM then KILL every other process living there."""
    prefix = ("HOME=" + os.path.realpath(home)).encode()
    victims = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(os.path.join("/proc", pid, "environ"), "rb") as handle:
                env = handle.read().split(b"\0")
        except OSError:
            continue
        if any(v == prefix or v.startswith(prefix + b"/") for v in env):
            victims.append(int(pid))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in victims:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.time() + 5
        while time.time() < deadline and any(pid_running(pid) for pid in victims):
            time.sleep(0.05)


def pid_running(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return False

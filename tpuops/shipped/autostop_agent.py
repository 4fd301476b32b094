# The tpuops autostop agent: runs detached on worker 0 and deletes its own TPU when nothing uses it.
#
# Sent as text and run by the worker's python3 (TPU VM images ship 3.8+): only the standard library and
# no newer syntax. It is not imported by tpuops. Layout under BASE = ~/tpuops/NAME:
#   BASE/autostop/agent.py     this file            BASE/autostop/config.json  written at install time
#   BASE/autostop/status.json  the latest decision  BASE/autostop/lock, pid     one agent per cluster
#   BASE/autostop.log          one JSON line per decision
#   BASE/keep-alive            present: the countdown stops (`tpuops autostop NAME off`, or by hand)
#
#   python3 agent.py install BASE REQUEST_JSON   write the config, (re)start the loop detached, print JSON
#   python3 agent.py run BASE                    the loop itself (what install starts)
#   python3 agent.py stop BASE [keep-alive]      stop the loop (and create the keep-alive file)
#   python3 agent.py status BASE [LINES]         print config, status and the log's tail as JSON
#
# Every tick it asks the host: is a tpuops run's process group alive (BASE/runs/RUN_ID/pid, no exit_code),
# does any process hold the TPU devices? Neither for `idle_seconds`, or `max_hours` after the TPU was
# created, and it deletes the TPU (the queued resource with force when there is one; a Compute Engine TPU's
# instance or group) with the VM's own token, after a warning `warn_seconds` before. It never deletes a node
# without the cluster's label and never touches the bucket beyond writing its record there.

import fcntl
import json
import os
import signal
import subprocess
import sys
import time

from tpuops.shipped.autostop_agent_host import (  # shipped: replaced by autostop_agent_host.py's text
    CLUSTER_LABEL,
    LOG_LIMIT_BYTES,
    MAX_BACKOFF,
    START_TIMEOUT,
    STOP_TIMEOUT,
    DeleteFailed,
    GcpComputeTpu,
    GcpTpu,
    Gone,
    HTTPException,
    LocalTpu,
    Paths,
    Stopped,
    URLError,
    device_holders,
    iso,
    live_runs,
    pid_running,
    read_json,
    write_json,
)
from tpuops.shipped.metadata_token import (  # shipped: replaced by metadata_token.py's text, which the host part uses
    MetadataToken,  # noqa: F401
)

# ------------------------------------------------------------------------------------------- the loop


class Agent:
    def __init__(self, paths, config, backend):
        self.paths = paths
        self.config = config
        self.backend = backend
        self.tick = float(config.get("tick_seconds") or 60)
        self.warn = float(config.get("warn_seconds") if config.get("warn_seconds") is not None else 60)
        self.idle_limit = config.get("idle_seconds")
        self.max_hours = config.get("max_hours")
        self.created_at = float(config.get("created_at") or time.time())
        self.started_at = time.time()
        self.idle_since = None
        self.warned_at = None
        self.last_failure = None
        self.failures = 0
        self.retry_at = 0.0
        self.state = "starting"
        self.busy = False

    # one tick: look, decide, act
    def step(self, now):
        """Returns False when the agent's work is over (TPU deleted or gone, or deletion refused)."""
        if os.path.exists(self.paths.keep_alive):
            self.idle_since = self.warned_at = None
            self.decide(now, "keep-alive", f"keep-alive file {self.paths.keep_alive} present: countdown stopped")
            return True
        deadline, reason, text = self.look(now)
        if deadline is None or now < deadline - self.warn:
            self.warned_at = None
            self.decide(now, "busy" if self.busy else "idle", text, deadline)
            return True
        if self.warned_at is None:
            self.warned_at = now
        fire_at = max(deadline, self.warned_at + self.warn, self.retry_at)
        if now < fire_at:
            action = "retry-wait" if self.retry_at > now else "warn"
            self.decide(now, action, f"{text}; deleting the TPU in {round(fire_at - now, 1):g}s", fire_at)
            return True
        return self.delete(now, reason, text)

    def look(self, now):
        """(when the TPU goes or None, why: idle | max_hours, what the host looks like)."""
        runs = live_runs(self.paths)
        holders = [] if runs else device_holders(self.config.get("device_glob") or "/dev/accel*")
        self.busy = bool(runs or holders)
        hard = self.created_at + float(self.max_hours) * 3600 if self.max_hours else None
        hard_text = f"max_hours {self.max_hours} since the TPU was created at {iso(self.created_at)}"
        if self.busy:
            self.idle_since = None
            text = "run {} alive".format(", ".join(runs)) if runs else "pid {} holds {}".format(*holders[0])
            return hard, "max_hours", text + ("; " + hard_text if hard is not None else "")
        if self.idle_since is None:
            self.idle_since = now
        text = f"idle for {now - self.idle_since:.0f}s (no run alive, no TPU device held)"
        if self.idle_limit is not None and (hard is None or self.idle_since + float(self.idle_limit) < hard):
            return self.idle_since + float(self.idle_limit), "idle", text
        if hard is not None:
            return hard, "max_hours", text + "; " + hard_text
        return None, "idle", text + "; idle stop off"

    def delete(self, now, reason, text):
        try:
            labels = self.backend.labels()
            if labels.get(CLUSTER_LABEL) != self.config["cluster"]:
                self.decide(now, "refused", "node {} does not carry the label {}={} (labels: {}): not deleting".format(
                    self.config["node"], CLUSTER_LABEL, self.config["cluster"], json.dumps(labels)), final="refused")
                return False
            # The record goes first: whoever finds the TPU gone (watch) must find why, never a preemption.
            record = {"cluster": self.config["cluster"], "time": iso(now), "reason": reason, "detail": text,
                      "node": self.config["node"], "queued": self.config.get("queued"),
                      "zone": self.config.get("zone"), "project": self.config.get("project"),
                      "created_at": iso(self.created_at), "uptime_seconds": round(now - self.created_at, 1),
                      "idle_seconds": self.idle_seconds(now)}
            problem = self.backend.write_record(record)
            operation = self.backend.delete()
        except Gone as gone:
            self.decide(now, "gone", str(gone), final="gone")
            return False
        except (DeleteFailed, URLError, OSError, ValueError, HTTPException) as err:
            self.failed(now, err)
            return True
        what = self.config.get("queued") or self.config["node"]
        detail = f"{reason}: deleted {what}" + (f" ({operation})" if operation else "")
        detail += f"; {problem}" if problem else ""
        self.decide(now, "deleted", detail, final="deleted")
        return False

    def failed(self, now, err):
        status = getattr(err, "status", None)
        message = getattr(err, "message", None) or str(err)
        hint = getattr(err, "hint", "")
        self.failures += 1
        backoff = min(MAX_BACKOFF, self.tick * (2 ** min(self.failures - 1, 10)))
        self.retry_at = now + backoff
        self.last_failure = {"time": iso(now), "status": status, "message": message, "hint": hint,
                             "attempts": self.failures, "retry_at": iso(self.retry_at)}
        hint_text = f" (hint: {hint})" if hint else ""
        self.decide(now, "delete-failed", f"{message}{hint_text}; retrying in {backoff:.0f}s", self.retry_at)

    def idle_seconds(self, now):
        return round(now - self.idle_since, 1) if self.idle_since is not None else 0.0

    # what it tells the world
    def decide(self, now, action, reason, fires_at=None, final=None):
        self.state = final or action
        entry = {"time": iso(now), "action": action, "reason": reason, "idle_seconds": self.idle_seconds(now)}
        if fires_at is not None:
            entry["fires_in"] = round(max(0.0, fires_at - now), 1)
        append_log(self.paths, entry)
        write_json(self.paths.status, {
            "pid": os.getpid(), "state": self.state, "action": action, "reason": reason, "time": now,
            "started_at": self.started_at, "idle_since": self.idle_since, "idle_seconds": self.idle_seconds(now),
            "fires_at": fires_at, "last_failure": self.last_failure, "tick_seconds": self.tick,
        })


def append_log(paths, entry):
    try:
        if os.path.getsize(paths.log) > LOG_LIMIT_BYTES:
            os.rename(paths.log, paths.log + ".1")
    except OSError:
        pass
    with open(paths.log, "a") as handle:
        handle.write(json.dumps(entry, sort_keys=True) + "\n")


def make_backend(config):
    if config.get("provider") == "local":
        return LocalTpu(config)
    return GcpComputeTpu(config) if config.get("api") == "compute" else GcpTpu(config)


def run(paths):
    lock = open(paths.lock, "a")  # noqa: SIM115  held (locked) for the agent's life
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        sys.stderr.write(f"tpuops autostop: already running for {paths.base} (pid {read_pid(paths)})\n")
        return 3
    with open(paths.pid, "w") as handle:
        handle.write(f"{os.getpid()}\n")

    def on_signal(signum, frame):
        raise Stopped()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    config = read_json(paths.config)
    agent = Agent(paths, config, make_backend(config))
    try:
        agent.decide(time.time(), "start", "agent started: idle {}, max_hours {}, tick {}s".format(
            config.get("idle_seconds"), config.get("max_hours"), agent.tick))
        while agent.step(time.time()):
            time.sleep(agent.tick)
    except Stopped:
        agent.decide(time.time(), "stop", "agent stopped", final="stopped")
    except Exception as err:  # noqa: BLE001  the reason must reach the log before the agent goes
        agent.decide(time.time(), "crash", f"agent crashed: {err!r}", final="crashed")
        raise
    finally:
        if read_pid(paths) == os.getpid():
            os.unlink(paths.pid)
    return 0


# ----------------------------------------------------------------------------------- install, stop, status


def read_pid(paths):
    try:
        with open(paths.pid) as handle:
            pid = int(handle.read().strip())
    except (OSError, ValueError):
        return None
    return pid if is_agent(pid) else None


def is_agent(pid):
    """The pid is a live autostop agent (pids are reused: check its command line too)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().split(b"\0")
    except OSError:
        return False
    return pid_running(pid) and any(arg.endswith(b"agent.py") for arg in argv) and b"run" in argv


def stop(paths, keep_alive=False):
    if keep_alive:
        with open(paths.keep_alive, "a"):
            pass
    pid = read_pid(paths)
    if pid is None:
        return {"stopped": False, "was_running": False, "keep_alive": os.path.exists(paths.keep_alive)}
    os.kill(pid, signal.SIGTERM)
    deadline = time.time() + STOP_TIMEOUT
    while time.time() < deadline and is_agent(pid):
        time.sleep(0.05)
    if is_agent(pid):
        os.kill(pid, signal.SIGKILL)
    return {"stopped": True, "was_running": True, "pid": pid, "keep_alive": os.path.exists(paths.keep_alive)}


def install(paths, request):
    config = request["config"]
    for key in ("cluster", "node", "provider"):
        if not config.get(key):
            raise ValueError(f"config has no {key}")
    stop(paths)
    write_json(paths.config, config)
    if request.get("clear_keep_alive") and os.path.exists(paths.keep_alive):
        os.unlink(paths.keep_alive)
    if os.path.exists(paths.status):
        os.unlink(paths.status)
    out = open(paths.output, "ab")  # noqa: SIM115  handed to the child, closed here after
    process = subprocess.Popen([sys.executable, paths.agent, "run", paths.base], stdin=subprocess.DEVNULL,
                               stdout=out, stderr=subprocess.STDOUT, close_fds=True, start_new_session=True,
                               cwd=paths.base)
    out.close()
    deadline = time.time() + START_TIMEOUT
    while time.time() < deadline:
        status = read_json(paths.status)
        if status and status.get("pid") == process.pid:
            return {"started": True, "pid": process.pid, "state": status.get("state")}
        if process.poll() is not None:
            break
        time.sleep(0.05)
    return {"started": False, "pid": process.pid, "error": f"agent did not start: {tail_text(paths.output)}"}


def tail_text(path, limit=400):
    try:
        with open(path, "rb") as handle:
            return handle.read()[-limit:].decode("utf-8", "replace").strip() or "(no output)"
    except OSError:
        return "(no output)"


def log_tail(paths, lines):
    try:
        with open(paths.log) as handle:
            text = handle.readlines()[-lines:]
    except OSError:
        return []
    entries = []
    for line in text:
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue
    return entries


def status(paths, lines):
    return {"installed": True, "running": read_pid(paths) is not None, "now": time.time(),
            "keep_alive": os.path.exists(paths.keep_alive), "config": read_json(paths.config),
            "status": read_json(paths.status), "log": log_tail(paths, lines)}


def main(argv):
    if len(argv) < 3:
        sys.stderr.write("usage: agent.py install|run|stop|status BASE [ARG]\n")
        return 2
    action, paths = argv[1], Paths(argv[2])
    arg = argv[3] if len(argv) > 3 else ""
    if not os.path.isdir(paths.dir):
        os.makedirs(paths.dir)
    if action == "run":
        return run(paths)
    if action == "install":
        result = install(paths, json.loads(arg))
    elif action == "stop":
        result = stop(paths, keep_alive=arg == "keep-alive")
    elif action == "status":
        result = status(paths, int(arg or 20))
    else:
        sys.stderr.write(f"unknown action {action!r}\n")
        return 2
    print(json.dumps(result, sort_keys=True))
    return 0 if result.get("started", True) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))

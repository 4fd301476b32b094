# tpuops: the processes of one run on this worker (functions shared by setup, start, stop and status).
# A run's setup and trainer start children that may leave its process group and session (setsid, a double
# fork, a daemon), so a run's processes are tracked two ways, and `stop` ends every one either way finds:
# - a cgroup (v2), where this host lets us make one below our own (root, or a delegated subtree): every
#   descendant stays in it whatever it does, even one that clears its environment;
# - everywhere: the environment. The run's processes start with TPUOPS_RUN_ID and TPUOPS_WORKER_ID, which
#   every descendant inherits, and /proc/PID/environ keeps what a process was started with (a process that
#   clears its environment escapes this one: that is what the cgroup is for). The worker id tells apart
#   the workers of one run that share a host (the local simulator).
# Each run directory records the worker id (worker_id) and, when there is one, the cgroup's path (cgroup).

scope_create() {  # RUN_DIR CLUSTER RUN_ID WORKER_ID: record the worker id; make the run's cgroup if allowed
    # (safe under `set -e`: nothing here may end the caller)
    printf '%s\n' "$4" > "$1/worker_id"
    [ "${TPUOPS_RUN_CGROUP:-on}" != off ] || return 0  # tests take the other way on a host that allows both
    scope_mount=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts 2>/dev/null) || scope_mount=""
    scope_own=$(sed -n 's/^0:://p' /proc/self/cgroup 2>/dev/null) || scope_own=""
    [ -n "$scope_mount" ] && [ -n "$scope_own" ] || return 0
    scope_parent="${scope_mount}${scope_own%/}"
    for scope_old in "$scope_parent/tpuops-$2-"*; do  # earlier runs' that nothing holds any more (not this
        case "$scope_old" in *"-$3-w"*) continue ;; esac  # run's: its other workers may share this host)
        rmdir "$scope_old" 2>/dev/null || true
    done
    # One cgroup per run, worker and home: the workers of the local simulator share one host.
    scope_dir="$scope_parent/tpuops-$2-$3-w$4-$(printf %s "$HOME" | cksum | cut -d' ' -f1)"
    if mkdir "$scope_dir" 2>/dev/null || [ -d "$scope_dir" ]; then
        [ -w "$scope_dir/cgroup.procs" ] && printf '%s\n' "$scope_dir" > "$1/cgroup"
    fi
    return 0
}

scope_members() {  # RUN_DIR RUN_ID: the live (not zombie) processes of the run, one pid a line
    {
        scope_cg=$(cat "$1/cgroup" 2>/dev/null) && cat "$scope_cg/cgroup.procs" 2>/dev/null
        scope_wid=$(cat "$1/worker_id" 2>/dev/null)
        if [ -n "$scope_wid" ]; then
            for scope_env in $(grep -lzxF "TPUOPS_RUN_ID=$2" /proc/[0-9]*/environ 2>/dev/null); do
                grep -qzxF "TPUOPS_WORKER_ID=$scope_wid" "$scope_env" 2>/dev/null || continue
                scope_pid=${scope_env#/proc/}; echo "${scope_pid%/environ}"
            done
        fi
        # The process groups of the run's setup and trainer (runs started before the two ways above).
        scope_leaders=$(cat "$1/pid" "$1/setup.pid" 2>/dev/null | tr '\n' ' ')
        [ -z "$scope_leaders" ] || ps -e -o pid= -o pgid= 2>/dev/null \
            | awk -v leaders=" $scope_leaders" 'index(leaders, " " $2 " ") { print $1 }'
    } | sort -un | while read -r scope_pid; do
        [ "$scope_pid" != "$$" ] || continue
        # /proc/PID/stat: "PID (COMM) STATE ...", COMM may hold ") ": the state follows the last one.
        scope_state=$(sed 's/.*) //' "/proc/$scope_pid/stat" 2>/dev/null | cut -c1)
        [ -z "$scope_state" ] || [ "$scope_state" = Z ] || echo "$scope_pid"
    done
}

scope_signal() {  # SIGNAL RUN_DIR RUN_ID: signal every live process of the run; false when there was none
    scope_live=$(scope_members "$2" "$3")
    [ -n "$scope_live" ] || return 1
    # shellcheck disable=SC2086  (one pid a word)
    kill -"$1" $scope_live 2>/dev/null
    return 0
}

scope_remove() {  # RUN_DIR: remove the run's cgroup once it is empty
    scope_cg=$(cat "$1/cgroup" 2>/dev/null) && rmdir "$scope_cg" 2>/dev/null
    return 0
}

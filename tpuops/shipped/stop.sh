# tpuops: stop a run on this worker.  sh -c "$(cat stop.sh)" stop CLUSTER RUN_ID GRACE
# TERM to every process of the run (its setup or trainer, and whatever they started, in their own sessions
# too: run_scope.sh), up to GRACE seconds to exit, then KILL, and wait until the KILL has taken effect.
# Marked killed before signalling, so a status check in between never reports the run as lost.
# An empty RUN_ID means this worker's current run (what `launch --replace` stops).
base="$HOME/tpuops/$1"
run="$2"
[ -n "$run" ] || run=$(cat "$base/current_run" 2>/dev/null) || true
run_dir="$base/runs/$run"
if [ -z "$run" ] || [ ! -d "$run_dir" ]; then echo "no run ${run:-at all} here"; exit 0; fi
# `stop ... mark`: the first pass over every worker, before any is signalled: a multi-host trainer whose peer is
# stopped first may exit on its own (an error), and that exit is the stop's doing too.
if [ "${4:-}" = mark ]; then [ -f "$run_dir/exit_code" ] || touch "$run_dir/killed"; exit 0; fi
what="run $run"
[ -f "$run_dir/pid" ] || what="setup of run $run"
if [ -z "$(scope_members "$run_dir" "$run")" ]; then
    scope_remove "$run_dir"
    if [ ! -f "$run_dir/pid" ]; then  # between its setup and its start: it must not start now
        touch "$run_dir/killed"; echo "stopped run $run before its trainer started"; exit 0
    fi
    echo "$what was not running"; exit 0
fi
[ -f "$run_dir/exit_code" ] || touch "$run_dir/killed"
scope_signal TERM "$run_dir" "$run"
waited=0
while [ -n "$(scope_members "$run_dir" "$run")" ] && [ "$waited" -lt "$(( $3 * 5 ))" ]; do
    sleep 0.2; waited=$((waited + 1))
done
if [ -z "$(scope_members "$run_dir" "$run")" ]; then
    scope_remove "$run_dir"
    echo "stopped $what"; exit 0
fi
cgroup=$(cat "$run_dir/cgroup" 2>/dev/null) && { echo 1 > "$cgroup/cgroup.kill"; } 2>/dev/null  # Linux 5.14+
waited=0
while scope_signal KILL "$run_dir" "$run" && [ "$waited" -lt 50 ]; do sleep 0.1; waited=$((waited + 1)); done
left=$(scope_members "$run_dir" "$run" | tr '\n' ' ')
if [ -n "$left" ]; then echo "tpuops: processes $left of $what survived KILL for 5 s" >&2; exit 1; fi
scope_remove "$run_dir"
echo "$what ignored TERM for $3 s: KILLed"

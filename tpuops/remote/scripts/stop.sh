# tpuops: stop a run's process group on this worker.  sh -c "$(cat stop.sh)" stop CLUSTER RUN_ID GRACE
# TERM to the whole group, up to GRACE seconds to exit, then KILL. Marked killed before signalling,
# so a status check in between never reports the run as lost.
# An empty RUN_ID means this worker's current run (what `launch --replace` stops).
base="$HOME/tpuops/$1"
run="$2"
[ -n "$run" ] || run=$(cat "$base/current_run" 2>/dev/null) || true
run_dir="$base/runs/$run"
pid=$(cat "$run_dir/pid" 2>/dev/null) || { echo "no run ${run:-at all} here"; exit 0; }
if kill -0 "-$pid" 2>/dev/null; then
    [ -f "$run_dir/exit_code" ] || touch "$run_dir/killed"
    kill -TERM "-$pid" 2>/dev/null || true
    waited=0
    while kill -0 "-$pid" 2>/dev/null && [ "$waited" -lt "$(( $3 * 10 ))" ]; do
        sleep 0.1; waited=$((waited + 1))
    done
    if kill -0 "-$pid" 2>/dev/null; then kill -KILL "-$pid" 2>/dev/null || true; echo "killed group $pid"
    else echo "stopped group $pid"; fi
else
    echo "run $run was not running"
fi

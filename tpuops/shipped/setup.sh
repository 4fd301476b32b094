# tpuops: trainer.setup, the first part of a run, once per distinct setup text.
#   sh -c "$(cat setup.sh)" setup CLUSTER RUN_ID WORKER_ID HASH FORCE SETUP
# The run exists on this worker from here on (its directory, current_run): `status` says "setup" while the
# setup runs, and `stop` ends it. The setup runs in its own process group, in the run's scope (run_scope.sh),
# with its output on ours, so it streams to the launcher (Python's unbuffered, as pip and friends are Python).
# It ends with our session too (Ctrl-C, a lost connection: hangup.sh signals us). setup_exit in the run
# directory says how it ended; exit 143 and a line saying so when `stop` ended it.
base="$HOME/tpuops/$1"
run="$2"
run_dir="$base/runs/$run"
mkdir -p "$run_dir" "$base/code" || exit 1
scope_create "$run_dir" "$1" "$run" "$3"
printf '%s\n' "$run" > "$base/current_run"
if [ "$5" != "1" ] && [ "$(cat "$base/setup.sha256" 2>/dev/null)" = "$4" ]; then
    echo 0 > "$run_dir/setup_exit"
    echo "setup unchanged, skipped"; exit 0
fi
cd "$base/code" || exit 1
# The run's marks go to the setup only (this script's own environment stays unmarked: `stop` ends the setup,
# and this script tells what happened).
TPUOPS_CLUSTER="$1" TPUOPS_RUN_ID="$run" TPUOPS_WORKER_ID="$3" PYTHONUNBUFFERED="${PYTHONUNBUFFERED:-1}" \
    setsid sh -c 'c=$(cat "$1/cgroup" 2>/dev/null) && { echo $$ > "$c/cgroup.procs"; } 2>/dev/null; exec sh -c "$2"' \
    tpuops-setup "$run_dir" "$6" < /dev/null &
pid=$!
echo "$pid" > "$run_dir/setup.pid"
hangup() {  # our session ended: so does the setup (TERM, then KILL what is left)
    touch "$run_dir/killed"
    scope_signal TERM "$run_dir" "$run" && sleep 2 && scope_signal KILL "$run_dir" "$run"
    exit 129
}
trap hangup HUP INT TERM
wait "$pid" 2>/dev/null  # (no "Terminated" from the shell: the line below says it)
code=$?
scope_remove "$run_dir"  # (when nothing the setup started still runs in it; start.sh makes it again)
if [ -f "$run_dir/killed" ]; then
    echo "tpuops: setup stopped (tpuops stop)" >&2
    exit 143
fi
echo "$code" > "$run_dir/setup_exit"
[ "$code" = 0 ] || exit "$code"
printf '%s\n' "$4" > "$base/setup.sha256"

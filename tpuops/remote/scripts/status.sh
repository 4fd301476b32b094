# tpuops: the state of a run on this worker.  sh -c "$(cat status.sh)" status CLUSTER [RUN_ID]
# Prints one line: "RUN_ID running PID" | "RUN_ID exited CODE" | "RUN_ID killed" | "RUN_ID lost" | "none".
base="$HOME/tpuops/$1"
run="${2:-}"
[ -n "$run" ] || run=$(cat "$base/current_run" 2>/dev/null) || true
if [ -z "$run" ] || [ ! -d "$base/runs/$run" ]; then echo "none"; exit 0; fi
run_dir="$base/runs/$run"
pid=$(cat "$run_dir/pid" 2>/dev/null) || pid=""
if [ -f "$run_dir/exit_code" ]; then echo "$run exited $(cat "$run_dir/exit_code")"
elif [ -n "$pid" ] && kill -0 "-$pid" 2>/dev/null; then echo "$run running $pid"
elif [ -f "$run_dir/killed" ]; then echo "$run killed"
else echo "$run lost"; fi

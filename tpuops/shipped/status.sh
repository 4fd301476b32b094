# tpuops: the state of a run on this worker.  sh -c "$(cat status.sh)" status CLUSTER [RUN_ID]
# Prints one line: "RUN_ID running PID" | "RUN_ID exited CODE" | "RUN_ID killed" | "RUN_ID setup PID" (its
# trainer.setup runs) | "RUN_ID setup-failed CODE" | "RUN_ID starting" (setup done, the trainer not yet
# started) | "RUN_ID lost" | "none".
base="$HOME/tpuops/$1"
run="${2:-}"
[ -n "$run" ] || run=$(cat "$base/current_run" 2>/dev/null) || true
if [ -z "$run" ] || [ ! -d "$base/runs/$run" ]; then echo "none"; exit 0; fi
run_dir="$base/runs/$run"
alive() {  # PGID: does the process group have a live member? (not `kill -0`: a zombie is no live member, and
    # some hosts' init, a container's, leaves them unreaped for a while)
    [ -n "$1" ] || return 1
    command -v ps >/dev/null 2>&1 || { kill -0 "-$1" 2>/dev/null; return; }
    ps -e -o pgid= -o stat= 2>/dev/null | awk -v g="$1" '$1 == g && $2 !~ /^Z/ { found = 1 } END { exit !found }'
}
pid=$(cat "$run_dir/pid" 2>/dev/null) || pid=""
setup_pid=$(cat "$run_dir/setup.pid" 2>/dev/null) || setup_pid=""
setup_exit=$(cat "$run_dir/setup_exit" 2>/dev/null) || setup_exit=""
# `killed` is marked only while the run had not ended (stop.sh): whatever exit came after is the stop's doing.
if alive "$pid"; then echo "$run running $pid"
elif [ -f "$run_dir/killed" ]; then echo "$run killed"
elif [ -f "$run_dir/exit_code" ]; then echo "$run exited $(cat "$run_dir/exit_code")"
elif [ -n "$setup_exit" ] && [ "$setup_exit" != 0 ]; then echo "$run setup-failed $setup_exit"
elif [ -n "$pid" ]; then echo "$run lost"
elif [ -n "$setup_exit" ]; then echo "$run starting"
elif alive "$setup_pid"; then echo "$run setup $setup_pid"
else echo "$run lost"; fi

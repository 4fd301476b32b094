# tpuops: stream a run's output on this worker until it ends, then exit with its exit code.
#   sh -c "$(cat follow.sh)" follow CLUSTER RUN_ID FROM_LINE
run_dir="$HOME/tpuops/$1/runs/$2"
pid=$(cat "$run_dir/pid" 2>/dev/null) || { echo "tpuops: no run $2 on this worker" >&2; exit 255; }
tail -s 0.3 -n "+$3" --pid="$pid" -F "$run_dir/output.log" 2>/dev/null
# tail ends when the wrapper exits; its exit code file follows right after.
for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    [ -f "$run_dir/exit_code" ] && exit "$(cat "$run_dir/exit_code")"
    [ -f "$run_dir/killed" ] && exit 137
    sleep 0.1
done
exit 255

# tpuops: is the run alive on this worker, and what does libtpu's runtime say? For the hang watchdog.
#   sh -c "$(cat watchdog_probe.sh)" watchdog_probe CLUSTER RUN_ID METRICS_PY
# Prints "state running|exited N|killed|lost|none", one "proc PID STATE WCHAN ARGS" per process of the run's
# process group, then "metrics JSON" or "metrics-unavailable REASON". The metrics come from libtpu's local
# gRPC metrics server (what `tpu-info` reads), at the first port of the trainer's TPU_RUNTIME_METRICS_PORTS
# (default 8431), read by METRICS_PY with the tpu-info package where this worker has it.
run_dir="$HOME/tpuops/$1/runs/$2"
pid=$(cat "$run_dir/pid" 2>/dev/null) || pid=""
case "$pid" in ''|*[!0-9]*) echo "state none"; echo "metrics-unavailable no run here"; exit 0;; esac
if [ -f "$run_dir/exit_code" ]; then echo "state exited $(cat "$run_dir/exit_code")"
elif kill -0 "-$pid" 2>/dev/null; then echo "state running"
elif [ -f "$run_dir/killed" ]; then echo "state killed"
else echo "state lost"; fi
members=$(ps -eo pid=,pgid= 2>/dev/null | awk -v g="$pid" '$2 == g {print $1}')
port=""
for p in $members; do
    ps -o pid=,stat=,wchan:32=,args= -p "$p" 2>/dev/null | cut -c1-300 | sed 's/^ */proc /'
    if [ -z "$port" ] && [ -r "/proc/$p/environ" ]; then
        port=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | sed -n 's/^TPU_RUNTIME_METRICS_PORTS=//p' | cut -d, -f1)
    fi
done
case "$port" in ''|*[!0-9]*) port=8431;; esac
hex=$(printf '%04X' "$port")
if ! cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p {f=1} END {exit !f}'
then
    echo "metrics-unavailable no libtpu metrics server on localhost:$port (not a TPU VM, or the runtime has not started)"
    exit 0
fi
python3 -c "$3" "$port" 2>&1 | tail -n 1

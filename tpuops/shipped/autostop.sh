# tpuops: the autostop agent on this worker.  sh -c "$(cat autostop.sh)" autostop ACTION CLUSTER [ARG]
# install: the agent's source comes on stdin and replaces ~/tpuops/CLUSTER/autostop/agent.py first; ARG is
# the install request (JSON). stop [keep-alive] and status [LINES] work on whatever agent is there.
base="$HOME/tpuops/$2"
agent="$base/autostop/agent.py"
if [ "$1" = install ]; then
    mkdir -p "$base/autostop" && cat > "$agent.tmp" && mv -f "$agent.tmp" "$agent" || exit 1
elif [ ! -f "$agent" ]; then
    # Never installed here: nothing to stop, but `autostop off` still leaves its cancel file.
    if [ "$1" = stop ] && [ "$3" = keep-alive ]; then mkdir -p "$base" && touch "$base/keep-alive"; fi
    echo '{"installed": false}'; exit 0
fi
command -v python3 >/dev/null 2>&1 || { echo "python3 not found on this worker (the autostop agent needs it)" >&2; exit 127; }
exec python3 "$agent" "$1" "$base" "$3"

# tpuops: new output of a run on this worker, for the hang watchdog.
#   sh -c "$(cat watchdog_progress.sh)" watchdog_progress CLUSTER RUN_ID OFFSET MAX_BYTES
# Prints "from N", then output.log from byte N: N is OFFSET, 0 when the file is shorter (replaced), or later
# when more than MAX_BYTES are new (only the last MAX_BYTES are sent).
log="$HOME/tpuops/$1/runs/$2/output.log"
if [ ! -f "$log" ]; then echo "from 0"; exit 0; fi
size=$(wc -c < "$log" | tr -d ' ')
from="$3"
case "$from" in ''|*[!0-9]*) from=0;; esac
[ "$size" -ge "$from" ] || from=0
[ $((size - from)) -le "$4" ] || from=$((size - $4))
echo "from $from"
tail -c "+$((from + 1))" "$log" | head -c "$((size - from))"

# tpuops: what every process of a hung run is doing on this worker, before the watchdog stops it.
#   sh -c "$(cat watchdog_capture.sh)" watchdog_capture CLUSTER RUN_ID LINES
# For each process of the run's process group: `py-spy dump` for a Python process (py-spy from PATH, ~/.local/bin
# or python3's venv, where `launch` installs it: py_spy.sh; through `sudo -n` when this user may not ptrace), else
# the fallback, headed by why py-spy did not dump: its state, kernel wait channel and kernel stack per thread
# (/proc, the stack needs root), and for a Python trainer that registered faulthandler for SIGUSR1 (seen in
# /proc/PID/status SigCgt) that signal, which makes it print its own traceback into its output. Then "=== output"
# and the last LINES lines of the output.
run_dir="$HOME/tpuops/$1/runs/$2"
pid=$(cat "$run_dir/pid" 2>/dev/null) || pid=""
as_root=""
if [ "$(id -u)" != 0 ] && sudo -n true 2>/dev/null; then as_root="sudo -n"; fi
spy=$(find_py_spy) || spy=""
signalled=""
echo "=== stacks"
case "$pid" in ''|*[!0-9]*) echo "no run $2 on this worker";; *)
for p in $(ps -eo pid=,pgid= 2>/dev/null | awk -v g="$pid" '$2 == g {print $1}'); do
    args=$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-300)
    echo "--- pid $p: $args"
    exe=$($as_root readlink "/proc/$p/exe" 2>/dev/null) || exe=$(cat "/proc/$p/comm" 2>/dev/null)
    case "${exe##*/}" in python*) ;; *) echo "state $(sed -n 's/^State:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null), wchan $(cat "/proc/$p/wchan" 2>/dev/null)"; continue;; esac
    if [ -n "$spy" ] && $as_root timeout 30 "$spy" dump --pid "$p" 2>&1; then continue; fi
    if [ -z "$spy" ]; then echo "py-spy is not installed here ($(why_no_py_spy "$1")): fallback"
    else echo "py-spy could not attach: fallback"; fi
    echo "state $(sed -n 's/^State:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null)"
    for task in /proc/"$p"/task/*; do
        echo "thread ${task##*/} $(cat "$task/comm" 2>/dev/null) wchan $(cat "$task/wchan" 2>/dev/null)"
        $as_root cat "$task/stack" 2>/dev/null | sed 's/^/    /'
    done
    caught=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null)
    case "$caught" in ''|*[!0-9a-fA-F]*) caught=0;; esac
    if [ $(( 0x$caught & 0x200 )) -ne 0 ]; then
        kill -USR1 "$p" 2>/dev/null && signalled=1 && echo "sent SIGUSR1 (faulthandler): its traceback is in the output below"
    fi
done;;
esac
[ -z "$signalled" ] || sleep 1
echo "=== output"
tail -n "$3" "$run_dir/output.log" 2>/dev/null
exit 0

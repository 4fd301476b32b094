# tpuops: stop whatever still holds the TPU, then remove libtpu's lock file.
#   sh -c "$(cat free_tpu.sh)" free_tpu DEVICE_GLOB LOCKFILE GRACE
# A process left holding /dev/accel* (v2-v4) or /dev/vfio/* (v5e+) makes the next run fail or silently
# fall back to CPU; so does a stale /tmp/libtpu_lockfile. Such a process often belongs to another user (a
# root container, an earlier `sudo python3 train.py`), whose /proc/PID/fd we cannot read: so we look, signal
# and remove as root through `sudo -n` where the user has passwordless sudo (TPU VMs grant it), and say so
# where we cannot.
glob="$1"; lockfile="$2"; grace="$3"
as_root=""
case "$glob" in
    # A leading ~/ means this worker's home (the local simulator keeps its fake devices there): only this
    # user's processes can hold those.
    "~/"*) glob="$HOME/${glob#??}";;
    *) if [ "$(id -u)" != 0 ]; then
           if sudo -n true 2>/dev/null; then as_root="sudo -n"
           else echo "note: $(id -un) has no passwordless sudo here: only its own processes were checked for holding the TPU"
           fi
       fi;;
esac
case "$lockfile" in "~/"*) lockfile="$HOME/${lockfile#??}";; esac
targets=""  # "-PGID" for a process group, "PID" for a process that leads none of its own
# find(1) -lname matches a link's target against a shell pattern, as `case` would.
for fd in $($as_root find /proc/[0-9]*/fd -mindepth 1 -maxdepth 1 -lname "$glob" 2>/dev/null); do
    pid=${fd#/proc/}; pid=${pid%%/*}
    case "$pid" in ''|*[!0-9]*) continue;; esac
    [ "$pid" -gt 1 ] && [ "$pid" != "$$" ] || continue
    target=$($as_root readlink "$fd" 2>/dev/null) || continue
    pgid=$(cut -d' ' -f5 "/proc/$pid/stat" 2>/dev/null | tr -d ' ')
    # Never a group id of 0 or 1, nor anything else than digits: `kill -TERM -1` means every process.
    case "$pgid" in [0-9]*[0-9]|[2-9]) what="-$pgid"; [ "$pgid" -gt 1 ] || what="$pid";; *) what="$pid";; esac
    case "$pgid" in *[!0-9]*) what="$pid";; esac
    case " $targets " in *" $what "*) ;; *)
        targets="$targets $what"
        owner=$(stat -c %U "/proc/$pid" 2>/dev/null)
        echo "stopping process group ${pgid:-?} (pid $pid of ${owner:-?}: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)) holding $target"
    esac
done
signal() {  # SIGNAL TARGET, with the shell's own kill: as root through `sudo -n sh -c` (procps' kill binary
    # is not used: some versions misread a negative process group id)
    if [ -n "$as_root" ]; then sudo -n sh -c 'kill -"$1" "$2"' signal "$1" "$2" 2>/dev/null
    else kill -"$1" "$2" 2>/dev/null; fi
}
for what in $targets; do signal TERM "$what" || true; done
waited=0
for what in $targets; do
    while signal 0 "$what" && [ "$waited" -lt "$(( grace * 10 ))" ]; do sleep 0.1; waited=$((waited + 1)); done
    signal KILL "$what" || true
done
if [ -e "$lockfile" ]; then $as_root rm -f "$lockfile" && echo "removed $lockfile"; fi
exit 0

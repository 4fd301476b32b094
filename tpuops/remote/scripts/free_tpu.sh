# tpuops: stop whatever still holds the TPU, then remove libtpu's lock file.
#   sh -c "$(cat free_tpu.sh)" free_tpu DEVICE_GLOB LOCKFILE GRACE
# A process left holding /dev/accel* (v2-v4) or /dev/vfio/* (v5e+) makes the next run fail or silently
# fall back to CPU; so does a stale /tmp/libtpu_lockfile.
glob="$1"; lockfile="$2"; grace="$3"
# A leading ~/ means this worker's home (the local simulator keeps its fake devices there).
case "$glob" in "~/"*) glob="$HOME/${glob#??}";; esac
case "$lockfile" in "~/"*) lockfile="$HOME/${lockfile#??}";; esac
groups=""
for fd in /proc/[0-9]*/fd/*; do
    target=$(readlink "$fd" 2>/dev/null) || continue
    # shellcheck disable=SC2254  # $glob is a pattern on purpose
    case "$target" in
        $glob)
            pid=${fd#/proc/}; pid=${pid%%/*}
            [ "$pid" = "$$" ] && continue
            pgid=$(cut -d' ' -f5 "/proc/$pid/stat" 2>/dev/null | tr -d ' ') || continue
            [ -n "$pgid" ] || continue
            case " $groups " in *" $pgid "*) ;; *)
                groups="$groups $pgid"
                echo "stopping process group $pgid (pid $pid: $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | cut -c1-120)) holding $target"
            esac;;
    esac
done
for pgid in $groups; do kill -TERM "-$pgid" 2>/dev/null || true; done
waited=0
for pgid in $groups; do
    while kill -0 "-$pgid" 2>/dev/null && [ "$waited" -lt "$(( grace * 10 ))" ]; do sleep 0.1; waited=$((waited + 1)); done
    kill -KILL "-$pgid" 2>/dev/null || true
done
if [ -e "$lockfile" ]; then rm -f "$lockfile" && echo "removed $lockfile"; fi
exit 0

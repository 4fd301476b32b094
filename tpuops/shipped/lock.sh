# tpuops: hold a cluster's launch lock on this worker (worker 0: the one place every launcher reaches).
#   sh -c "$(cat lock.sh)" lock CLUSTER RUN_ID ORIGIN WAIT TTL
# The lock is flock(1) on ~/tpuops/CLUSTER/launch.lock, held by this process: the kernel lets go of it when
# the process ends, so it never outlives its holder. This process ends when the launcher lets go (closes our
# stdin), when its session ends (the launcher died: sshd closes our stdin), or when the launcher's heartbeat (a
# byte every few seconds on stdin) stops for TTL seconds (the launcher's machine went away without a word).
# Prints one line: "acquired [RUN_ID SINCE ORIGIN of the last launch]", or "busy RUN_ID SINCE ORIGIN" naming
# the launch that holds it (after waiting up to WAIT seconds for it, announced by "waiting ..."; 0: no wait).
base="$HOME/tpuops/$1"
owner="$base/launch.owner"
mkdir -p "$base" || exit 1
if ! command -v flock >/dev/null 2>&1; then
    echo "acquired"  # no util-linux here: launches of this cluster are not kept apart
    echo "note: flock(1) is missing on this worker: two launches at once are not refused" >&2
    exec cat >/dev/null
fi
exec 9>>"$base/launch.lock"
if ! flock -n 9; then
    [ "$4" -gt 0 ] && echo "waiting $(cat "$owner" 2>/dev/null)"
    if [ "$4" -le 0 ] || ! flock -w "$4" 9; then echo "busy $(cat "$owner" 2>/dev/null)"; exit 0; fi
fi
last=$(cat "$owner" 2>/dev/null)
printf '%s %s %s\n' "$2" "$(date +%s)" "$3" > "$owner.tmp" && mv -f "$owner.tmp" "$owner"
echo "acquired $last"
# Held while heartbeats come (each read waits at most TTL seconds; end of input or silence: let go).
while [ -n "$(timeout "$5" head -c 1 2>/dev/null)" ]; do :; done

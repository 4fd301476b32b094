# tpuops: run a command so that it ends with our session, as `ssh -t` would.  sh -c "$(cat hangup.sh)" hangup LINE
# Without a terminal, sshd does not signal a command whose client went away (Ctrl-C, a closed pipe, a lost
# connection): `sleep 30` would run on. So LINE runs in its own process group, and a watcher reads the
# session's stdin, which tpuops keeps open until it is done: end of input means the session is gone, and
# the whole group gets HUP (then KILL after a grace period). LINE itself reads /dev/null, as before.
exec 3<&0
setsid "${SHELL:-/bin/sh}" -c "$1" 3<&- </dev/null &
command_pid=$!
{ cat >/dev/null; kill -HUP "-$command_pid"; sleep 3; kill -KILL "-$command_pid"; } <&3 >/dev/null 2>&1 &
watcher_pid=$!
exec 3<&-
wait "$command_pid"
code=$?
kill "$watcher_pid" 2>/dev/null
exit "$code"

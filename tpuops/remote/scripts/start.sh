# tpuops: start a run detached on this worker.  sh -c "$(cat start.sh)" start CLUSTER RUN_ID COMMAND
# The trainer gets its own session and process group (setsid): it outlives the SSH connection and
# `stop` can signal the whole group. Its exit code lands in the run directory when it ends.
set -eu
base="$HOME/tpuops/$1"
run_dir="$base/runs/$2"
mkdir -p "$run_dir" "$base/code"
printf '%s\n' "$3" > "$run_dir/command"
# NAME=VALUE settings (Multislice's MEGASCALE_*) that only fill gaps: what this host's environment already has
# (the TPU runtime's own) wins. Names and values come from tpuops: identifiers, and values without blanks.
set -f  # split on blanks, never expand a pattern
for setting in ${TPUOPS_HOST_DEFAULTS:-}; do
    name=${setting%%=*}
    case $name in ''|*[!A-Za-z0-9_]*) continue ;; esac  # only a plain name ever reaches eval
    eval "given=\${$name+yes}"
    [ -n "$given" ] || export "$setting"
done
set +f
setsid sh -c 'cd "$1" && sh -c "$2"; echo $? > "$3/exit_code.tmp" && mv "$3/exit_code.tmp" "$3/exit_code"' \
    tpuops-run "$base/code" "$3" "$run_dir" > "$run_dir/output.log" 2>&1 < /dev/null &
echo $! > "$run_dir/pid"
printf '%s\n' "$2" > "$base/current_run"
echo "started pid $!"

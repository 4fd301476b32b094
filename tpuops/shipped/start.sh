# tpuops: start a run detached on this worker.  sh -c "$(cat start.sh)" start CLUSTER RUN_ID COMMAND
# The trainer gets its own session and process group (setsid): it outlives the SSH connection. It runs in the
# run's scope (run_scope.sh: TPUOPS_RUN_ID and TPUOPS_WORKER_ID come with its environment), which `stop`
# ends whole. Its exit code lands in the run directory when it ends. A run stopped during its setup stays
# stopped (exit 143).
set -eu
base="$HOME/tpuops/$1"
run_dir="$base/runs/$2"
mkdir -p "$run_dir" "$base/code"
if [ -f "$run_dir/killed" ]; then echo "tpuops: run $2 was stopped (tpuops stop) before its trainer started" >&2; exit 143; fi
scope_create "$run_dir" "$1" "$2" "${TPUOPS_WORKER_ID:-}"
printf '%s\n' "$3" > "$run_dir/command"
# NAME=VALUE settings (Multislice's MEGASCALE_*) that only fill gaps: what this host's environment already has
# wins, and so does what its `tpu-env` metadata lists (Google's runtime writes the MEGASCALE_* values of a
# queued-resource Multislice there, and JAX reads them when the variables are unset). Names and values come
# from tpuops: identifiers, and values without blanks.
tpu_env=""
if [ -n "${TPUOPS_HOST_DEFAULTS:-}" ]; then
    # GCE_METADATA_HOST: google-auth's name for the metadata server (tests point it at a fake).
    url="http://${GCE_METADATA_HOST:-metadata.google.internal}/computeMetadata/v1/instance/attributes/tpu-env"
    if command -v curl >/dev/null 2>&1; then
        tpu_env=$(curl -sf --noproxy '*' --max-time 3 -H 'Metadata-Flavor: Google' "$url" 2>/dev/null) || tpu_env=""
    elif command -v python3 >/dev/null 2>&1; then
        tpu_env=$(python3 -c 'import sys, urllib.request as u
try: print(u.urlopen(u.Request(sys.argv[1], headers={"Metadata-Flavor": "Google"}), timeout=3).read().decode())
except Exception: pass' "$url" 2>/dev/null) || tpu_env=""
    fi
fi
# A coordinator address that carries its port (`10.0.0.2:8080`: in this host's environment, trainer.env or tpu-env)
# says where the slices meet: a default MEGASCALE_PORT then takes that port, never tpuops's own beside it.
coordinator=${MEGASCALE_COORDINATOR_ADDRESS:-$(printf '%s\n' "$tpu_env" | sed -n \
    "s/^[[:space:]]*MEGASCALE_COORDINATOR_ADDRESS[[:space:]]*:[[:space:]]*'*\([^' ]*\)'*[[:space:]]*\$/\\1/p" | head -n 1)}
case $coordinator in
    \[*\]:*) coordinator_port=${coordinator##*]:} ;;  # [IPv6]:PORT
    *:*:*) coordinator_port="" ;;  # a bare IPv6 address
    *:*) coordinator_port=${coordinator##*:} ;;
    *) coordinator_port="" ;;
esac
case $coordinator_port in *[!0-9]*) coordinator_port="" ;; esac
set -f  # split on blanks, never expand a pattern
for setting in ${TPUOPS_HOST_DEFAULTS:-}; do
    name=${setting%%=*}
    case $name in ''|*[!A-Za-z0-9_]*) continue ;; esac  # only a plain name ever reaches eval
    eval "given=\${$name+yes}"
    [ -z "$given" ] || continue
    # tpu-env's lines read `NAME: 'value'`
    printf '%s\n' "$tpu_env" | grep -q "^[[:space:]]*$name[[:space:]]*:" && continue
    [ "$name" != MEGASCALE_PORT ] || [ -z "$coordinator_port" ] || setting="MEGASCALE_PORT=$coordinator_port"
    export "$setting"
done
set +f
# The wrapper joins the run's cgroup first; when the trainer has ended it leaves it and removes it (unless
# something the trainer started still runs there: then `stop` does).
setsid sh -c 'c=$(cat "$3/cgroup" 2>/dev/null) && { echo $$ > "$c/cgroup.procs"; } 2>/dev/null
cd "$1" && sh -c "$2"; echo $? > "$3/exit_code.tmp" && mv "$3/exit_code.tmp" "$3/exit_code"
[ -z "$c" ] || { echo $$ > "${c%/*}/cgroup.procs" && rmdir "$c"; } 2>/dev/null; :' \
    tpuops-run "$base/code" "$3" "$run_dir" > "$run_dir/output.log" 2>&1 < /dev/null &
echo $! > "$run_dir/pid"
printf '%s\n' "$2" > "$base/current_run"
echo "started pid $!"

# tpuops: run trainer.setup once per distinct setup text.  sh -c "$(cat setup.sh)" setup CLUSTER HASH FORCE SETUP
base="$HOME/tpuops/$1"
mkdir -p "$base/code"
if [ "$3" != "1" ] && [ "$(cat "$base/setup.sha256" 2>/dev/null)" = "$2" ]; then
    echo "setup unchanged, skipped"; exit 0
fi
cd "$base/code" || exit 1
sh -c "$4" || exit $?
printf '%s\n' "$2" > "$base/setup.sha256"

# tpuops: make sure py-spy is on this worker for the hang watchdog's captures (`pip install --user py-spy`,
# detached, so `launch` does not wait for it).  sh -c "$(cat watchdog_tools.sh)" watchdog_tools CLUSTER
if command -v py-spy >/dev/null 2>&1 || [ -x "$HOME/.local/bin/py-spy" ]; then echo "py-spy present"; exit 0; fi
mkdir -p "$HOME/tpuops/$1"
nohup python3 -m pip install --user --quiet py-spy > "$HOME/tpuops/$1/py-spy-install.log" 2>&1 < /dev/null &
echo "installing py-spy"

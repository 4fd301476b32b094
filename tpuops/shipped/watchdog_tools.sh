# tpuops: make sure py-spy is on this worker for the hang watchdog's captures, installed in the background
# (`launch` does not wait) by python3's pip: into python3's venv when python3 runs in one (pip refuses --user
# there), else for the user (~/.local/bin). The log ends with "tpuops: pip exited N"; a capture without py-spy
# quotes why from it (py_spy.sh).  sh -c "$(cat py_spy.sh watchdog_tools.sh)" watchdog_tools CLUSTER
if find_py_spy >/dev/null; then echo "py-spy present"; exit 0; fi
mkdir -p "$HOME/tpuops/$1"
if python3 -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' 2>/dev/null; then
    where="" && echo "installing py-spy into the venv of python3 ($(command -v python3))"
else
    where="--user" && echo "installing py-spy for the user"
    # One binary without dependencies in the user's site: PEP 668's "externally managed" guards the system's
    # packages, which this leaves alone (a pip that predates the setting ignores it).
    export PIP_BREAK_SYSTEM_PACKAGES=1
fi
# $where is one word or none: unquoted on purpose.
nohup sh -c 'python3 -m pip install $1 --quiet py-spy; echo "tpuops: pip exited $?"' sh "$where" \
    > "$HOME/tpuops/$1/py-spy-install.log" 2>&1 < /dev/null &

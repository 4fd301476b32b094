# tpuops: where py-spy is on this worker, and why not (the part watchdog_tools.sh and watchdog_capture.sh share).
# `launch` installs it with python3's pip: into python3's venv when python3 runs in one, else with --user.
find_py_spy() {
    command -v py-spy 2>/dev/null && return 0
    if [ -x "$HOME/.local/bin/py-spy" ]; then echo "$HOME/.local/bin/py-spy"; return 0; fi
    scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null) || return 1
    [ -x "$scripts/py-spy" ] && echo "$scripts/py-spy"
}

# $1 the cluster: why find_py_spy found nothing, from the log of the install `launch` started (watchdog_tools.sh).
why_no_py_spy() {
    log="$HOME/tpuops/$1/py-spy-install.log"
    if [ ! -f "$log" ]; then
        echo "launch did not install it: the watchdog or TPUOPS_WATCHDOG_INSTALL was off then"
        return
    fi
    case "$(tail -n 1 "$log")" in
        "tpuops: pip exited 0") echo "pip installed it where this shell does not find it, see $log" ;;
        "tpuops: pip exited "*)
            err=$(grep -E '^(ERROR|error)|No module named|not found' "$log" | tail -n 1)
            [ -n "$err" ] || err=$(grep -v '^tpuops: ' "$log" | grep . | tail -n 1)
            echo "its install failed: $(printf '%s' "$err" | cut -c1-240); see $log" ;;
        *) echo "its install, started by launch, has not finished, see $log" ;;
    esac
}

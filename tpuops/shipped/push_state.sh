# Which tree a push destination holds: `{"tree": "<id>"}`, or `{"tree": null}` when it holds none yet.
# Usage: push_state.sh DEST (a leading ~/ is the home directory). The same answer as the push agent's `state`
# action (push_agent.py), in sh: a no-change push is mostly this question, and sh answers it in a few
# milliseconds where starting Python takes tens. Exit 4 (push_protocol.EXIT_NOT_OURS) when DEST is not ours.
case $1 in
    "~") dest=$HOME ;;
    "~/"*) dest=$HOME/${1#"~/"} ;;
    *) dest=$1 ;;
esac
trees=$(dirname -- "$dest")/.tpuops-trees/$(basename -- "$dest")
if [ -L "$dest" ]; then
    tree=$(basename -- "$(readlink -- "$dest")")
    case $tree in
        *[!0-9a-f]* | "") tree= ;;
    esac
    if [ -n "$tree" ] && [ -d "$trees/$tree" ]; then
        printf '{"tree": "%s"}\n' "$tree"
        exit 0
    fi
elif [ -e "$dest" ] && ! { [ -d "$dest" ] && [ -z "$(ls -A -- "$dest")" ]; }; then
    echo "tpuops-push: $dest exists and was not created by tpuops push; move it away or choose another destination" >&2
    exit 4
fi
echo '{"tree": null}'

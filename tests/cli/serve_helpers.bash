# serve_helpers.bash: a real mfc-serve on loopback for the client-side bats
# tests (api-clients.bats, run.bats, serve-load.bats), on a tiny mkmodel llama.
#
#   serve_model "$BATS_FILE_TMPDIR/toy.gguf" [mkmodel args...]   # makes the GGUF
#   serve_start "$BATS_FILE_TMPDIR" toy.gguf [mfc-serve args...] # sets SERVE_URL, SERVE_PID
#   serve_stop                                                   # SIGTERM, waits, reaps
# The server's stderr goes to $dir/serve.log; serve_start fails (and prints
# the log) when it is not healthy within 60 s.
: "${MFC_BUILDDIR:=$BATS_TEST_DIRNAME/../..}"
MFC_SERVE_BIN="$MFC_BUILDDIR/mfc-serve"
MKMODEL="$MFC_BUILDDIR/tests/tools/mkmodel"
NODE_MODULES="${MFC_NODE_MODULES:-$MFC_SRCDIR/tests/tools/node/node_modules}"
NODE_TOOLS="$MFC_SRCDIR/tests/tools/node"

# A free TCP port on 127.0.0.1 (python binds port 0 and reports it).
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

serve_model() {
    local out=$1
    shift
    [ -f "$out" ] || "$MKMODEL" -o "$out" --preset toy "$@" >/dev/null
}

serve_start() {
    local dir=$1 model=$2
    shift 2
    SERVE_PORT=$(free_port)
    SERVE_URL="http://127.0.0.1:$SERVE_PORT"
    SERVE_LOG="$dir/serve.log"
    "$MFC_SERVE_BIN" --model "$dir/$model" --host 127.0.0.1 --port "$SERVE_PORT" --threads 1 "$@" \
        </dev/null >"$dir/serve.out" 2>"$SERVE_LOG" &
    SERVE_PID=$!
    export SERVE_URL SERVE_PORT SERVE_PID SERVE_LOG
    local i
    for i in $(seq 1 600); do
        if curl -sf -o /dev/null "$SERVE_URL/health"; then
            return 0
        fi
        if ! kill -0 "$SERVE_PID" 2>/dev/null; then
            echo "mfc-serve exited before it was ready:" >&2
            cat "$SERVE_LOG" >&2
            return 1
        fi
        sleep 0.1
    done
    echo "mfc-serve was not healthy after 60 s:" >&2
    tail -20 "$SERVE_LOG" >&2
    return 1
}

# Stops the server started by serve_start; fails when it does not exit
# within 20 s of SIGTERM or exits non-zero.
serve_stop() {
    [ -n "${SERVE_PID:-}" ] || return 0
    kill -TERM "$SERVE_PID" 2>/dev/null || true
    local i
    for i in $(seq 1 200); do
        kill -0 "$SERVE_PID" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$SERVE_PID" 2>/dev/null; then
        kill -KILL "$SERVE_PID"
        wait "$SERVE_PID" 2>/dev/null
        SERVE_PID=
        echo "mfc-serve did not exit within 20 s of SIGTERM" >&2
        return 1
    fi
    local rc=0
    wait "$SERVE_PID" || rc=$?
    SERVE_PID=
    return $rc
}

# One metric's value (the first series that matches) from /metrics:
# `metric mfc:num_requests_running`, or with the first label(s) spelled out,
# `metric 'mfc:request_success_total{finished_reason="abort"'`.
metric() {
    curl -sf "$SERVE_URL/metrics" |
        awk -v n="$1" '$1 == n || index($1, n "{") == 1 || (index(n, "{") && index($1, n) == 1) { print $2; exit }'
}

require_node_clients() {
    command -v node >/dev/null || skip "node is not installed"
    [ -d "$NODE_MODULES/openai" ] && [ -d "$NODE_MODULES/ollama" ] ||
        skip "the openai/ollama npm packages are not installed at $NODE_MODULES (cd tests/tools/node && npm ci)"
}

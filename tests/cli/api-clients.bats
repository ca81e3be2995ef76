#!/usr/bin/env bats
# api-clients.bats: the official `openai` and `ollama` npm clients, unchanged,
# against a real mfc-serve on a tiny mkmodel llama (tests/tools/node/api-client.mjs
# does the calls and asserts on the answers: chat, completions, streaming,
# models list, error statuses; generate, chat, streaming, list, show), with
# and without an API key and with a named adapter. Loopback only.
load helpers
load serve_helpers

setup_file() {
    D="$BATS_FILE_TMPDIR"
    serve_model "$D/toy.gguf"
    "$MKMODEL" -o "$D/sql.gguf" --preset toy --lora 4 --targets q,v >/dev/null
}

teardown() {
    serve_stop || true
}

api_client() {
    MFC_NODE_MODULES="$NODE_MODULES" run node "$NODE_TOOLS/api-client.mjs" --base "$SERVE_URL" "$@"
    echo "$output"
}

@test "openai and ollama clients: every call works against mfc-serve" {
    require_node_clients
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy
    api_client --model toy
    [ "$status" -eq 0 ]
    # every check ran and passed (a silently skipped section would show here)
    [ "$(grep -c '^ok ' <<<"$output")" -ge 15 ]
    [ -z "$(grep '^not ok' <<<"$output")" ]
    serve_stop
}

@test "openai and ollama clients: bearer key required and accepted" {
    require_node_clients
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy --api-key s3cret
    api_client --model toy --api-key s3cret
    [ "$status" -eq 0 ]
    grep -q '^ok .* a wrong key is AuthenticationError (401)' <<<"$output"
    # and a client without the key is refused
    run curl -s -o /dev/null -w '%{http_code}' "$SERVE_URL/v1/models"
    [ "$output" = 401 ]
}

@test "openai client: a named adapter is a model of its own" {
    require_node_clients
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy --adapter "sql=$BATS_FILE_TMPDIR/sql.gguf"
    api_client --model toy --adapter sql --only openai
    [ "$status" -eq 0 ]
    grep -q '^ok .* the adapter is selected by the model field' <<<"$output"
}

@test "mfc serve FILE.gguf runs mfc-serve on that file" {
    require_node_clients
    port=$(free_port)
    "$MFC" serve "$BATS_FILE_TMPDIR/toy.gguf" -p "$port" --host 127.0.0.1 \
        </dev/null >"$BATS_TEST_TMPDIR/out" 2>&1 &
    SERVE_PID=$!
    SERVE_URL="http://127.0.0.1:$port"
    for i in $(seq 1 300); do
        curl -sf -o /dev/null "$SERVE_URL/health" && break
        sleep 0.1
    done
    run curl -sf "$SERVE_URL/v1/models"
    [ "$status" -eq 0 ]
    # served under the file's stem; the pid is mfc-serve's own (exec)
    [ "$(jq -r '.data[0].id' <<<"$output")" = toy ]
    [ "$(readlink /proc/$SERVE_PID/exe)" = "$(readlink -f "$MFC_SERVE_BIN")" ]
    api_client --model toy --only ollama
    [ "$status" -eq 0 ]
}

@test "mfc serve IMAGE: weights and adapters come from the store, model.yaml applies" {
    require_node_clients
    D="$BATS_TEST_TMPDIR"
    export MFC_HOME="$D/store"
    cp "$BATS_FILE_TMPDIR/toy.gguf" "$BATS_FILE_TMPDIR/sql.gguf" "$D/"
    printf 'FROM ./toy.gguf\nADAPTER --name=sql ./sql.gguf\nPARAMETER num_predict 3\nSYSTEM "be brief"\n' >"$D/Modelfile"
    MFC_SERVE="$MFC_SERVE_BIN" run "$MFC" build -q -t toyimg:v1 "$D"
    [ "$status" -eq 0 ]
    rm "$D/toy.gguf" "$D/sql.gguf" # nothing outside the store is used
    port=$(free_port)
    "$MFC" serve toyimg:v1 -p "$port" --host 127.0.0.1 </dev/null >"$D/out" 2>&1 &
    SERVE_PID=$!
    SERVE_URL="http://127.0.0.1:$port"
    for i in $(seq 1 300); do
        curl -sf -o /dev/null "$SERVE_URL/health" && break
        kill -0 $SERVE_PID || { cat "$D/out"; false; }
        sleep 0.1
    done
    run curl -sf "$SERVE_URL/v1/models"
    [ "$status" -eq 0 ]
    echo "$output"
    jq -e '[.data[].id] | index("toyimg:v1") != null and index("sql") != null' <<<"$output"
    # the weights are a range of their layer blob, mapped in place: no copy
    args=$(tr '\0' ' ' </proc/$SERVE_PID/cmdline)
    echo "$args"
    [[ "$args" == *"--model $MFC_HOME/blobs/sha256/"*" --model-offset "* ]]
    [[ "$args" == *"--model-size $(stat -c %s "$BATS_FILE_TMPDIR/toy.gguf")"* ]]
    # so is the adapter: model.yaml (a memfd) names its layer blob with offset:
    # and size:, the server maps that blob, and nothing lands in the store's tmp
    cfg=$(sed -n 's/.*--config \(\/proc\/self\/fd\/[0-9]*\).*/\1/p' <<<"$args")
    [ -n "$cfg" ]
    yaml=$(cat "/proc/$SERVE_PID/fd/${cfg##*/}")
    echo "$yaml"
    [[ "$yaml" == *"path: \"$MFC_HOME/blobs/sha256/"*"offset: "*"size: $(stat -c %s "$BATS_FILE_TMPDIR/sql.gguf")"* ]]
    weights=$(sed -n 's/.*--model \([^ ]*\) .*/\1/p' <<<"$args")
    grep -o "$MFC_HOME/blobs/sha256/[0-9a-f]*" "/proc/$SERVE_PID/maps" | sort -u >"$D/mapped"
    cat "$D/mapped"
    grep -qx "$weights" "$D/mapped"
    [ "$(grep -vcx "$weights" "$D/mapped")" -eq 1 ] # the adapter's layer blob
    ! ls -l "/proc/$SERVE_PID/fd" | grep -q "$MFC_HOME/tmp"
    [ -z "$(ls -A "$MFC_HOME/tmp" 2>/dev/null)" ]
    [ -z "$(grep -i 'copied' "$D/out")" ]
    # the image's PARAMETER num_predict 3 and SYSTEM are in force
    run curl -sf "$SERVE_URL/api/generate" -d '{"model":"toyimg:v1","prompt":"hi","stream":false}'
    [ "$status" -eq 0 ]
    [ "$(jq -r .eval_count <<<"$output")" -le 3 ]
    run curl -sf "$SERVE_URL/api/show" -d '{"model":"toyimg:v1"}'
    [ "$(jq -r .system <<<"$output")" = "be brief" ]
    api_client --model toyimg:v1 --adapter sql --only openai
    [ "$status" -eq 0 ]
}

@test "mfc serve: usage errors and an unknown image" {
    run "$MFC" serve
    [ "$status" -eq 2 ]
    run "$MFC" serve x.gguf -p 70000
    [ "$status" -eq 2 ]
    [[ "$output" == *"not a port"* ]]
    MFC_HOME="$BATS_TEST_TMPDIR/store" MFC_SERVE="$MFC_SERVE_BIN" run "$MFC" serve no-such-image
    [ "$status" -eq 1 ]
    [[ "$output" == *no-such-image* ]]
    MFC_SERVE="$MFC_SERVE_BIN" run "$MFC" serve "$BATS_TEST_TMPDIR/missing.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"no such file"* ]]
}

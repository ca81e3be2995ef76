#!/usr/bin/env bats
# run.bats: `mfc run` against the real mfc-serve it starts on a private
# port: one prompt from the argument or stdin, the interactive chat driven
# through stdin (/set parameter, turns with history, /show, /clear, /bye,
# """ blocks), and the server gone afterwards. The answers are checked against
# the same model served by `mfc serve` and asked over /api/chat with curl:
# the image's PARAMETER temperature 0 makes both greedy.
load helpers
load serve_helpers

setup_file() {
    D="$BATS_FILE_TMPDIR"
    serve_model "$D/toy.gguf"
    export MFC_HOME="$D/store" MFC_SERVE="$MFC_SERVE_BIN"
    printf 'FROM ./toy.gguf\nPARAMETER temperature 0\nPARAMETER num_predict 6\n' >"$D/Modelfile"
    "$MFC" build -q -t toy "$D" >/dev/null
    # the reference: the same image under mfc serve
    port=$(free_port)
    "$MFC" serve toy -p "$port" --host 127.0.0.1 </dev/null >"$D/ref.log" 2>&1 &
    echo $! >"$D/ref.pid"
    echo "http://127.0.0.1:$port" >"$D/ref.url"
    for i in $(seq 1 300); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/health" && return 0
        sleep 0.1
    done
    cat "$D/ref.log" >&2
    return 1
}

teardown_file() {
    kill -TERM "$(cat "$BATS_FILE_TMPDIR/ref.pid")" 2>/dev/null || true
}

# The reference answer to a conversation: chat USER1 [ASSISTANT1 USER2 ...].
ref_chat() {
    local msgs='[]' role=user m
    for m in "$@"; do
        msgs=$(jq -c --arg r "$role" --arg c "$m" '. + [{role: $r, content: $c}]' <<<"$msgs")
        [ $role = user ] && role=assistant || role=user
    done
    curl -sf "$(cat "$BATS_FILE_TMPDIR/ref.url")/api/chat" \
        -d "{\"model\":\"toy\",\"stream\":false,\"messages\":$msgs}" | jq -j .message.content
}

# stdout, as written (bats' $output drops trailing newlines)
run_out() {
    "$MFC" run "$@" >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err"
}

@test "mfc run IMAGE PROMPT answers once, streaming the reply to stdout" {
    want=$(ref_chat "Hello there")
    [ -n "$want" ]
    run_out toy Hello there </dev/null
    cat "$BATS_TEST_TMPDIR/err"
    [ "$(cat "$BATS_TEST_TMPDIR/out")" = "$want" ]
    # the reply ends with a newline
    [ "$(tail -c 1 "$BATS_TEST_TMPDIR/out" | od -An -c | tr -d ' ')" = '\n' ]
}

@test "mfc run IMAGE < prompt reads the prompt from stdin, then the argument words" {
    want=$(ref_chat "Hello there")
    echo "Hello there" | run_out toy
    [ "$(cat "$BATS_TEST_TMPDIR/out")" = "$want" ]
    want=$(ref_chat "Hello there friend")
    echo "Hello there" | run_out toy friend
    [ "$(cat "$BATS_TEST_TMPDIR/out")" = "$want" ]
}

@test "mfc run FILE.gguf works without an image and leaves no server behind" {
    D="$BATS_TEST_TMPDIR"
    cp "$BATS_FILE_TMPDIR/toy.gguf" "$D/only-here.gguf"
    run "$MFC" run "$D/only-here.gguf" Hi
    [ "$status" -eq 0 ]
    [ -z "$(ps -eo args | grep -v grep | grep "only-here.gguf")" ]
}

@test "mfc run killed with SIGKILL takes its server with it" {
    D="$BATS_TEST_TMPDIR"
    cp "$BATS_FILE_TMPDIR/toy.gguf" "$D/killed-run.gguf"
    mkfifo "$D/in"
    "$MFC" run -i "$D/killed-run.gguf" <"$D/in" >"$D/out" 2>&1 &
    pid=$!
    exec 8>"$D/in" # keep the chat waiting at its prompt
    for i in $(seq 1 600); do
        grep -q '>>> ' "$D/out" && break
        sleep 0.1
    done
    grep -q '>>> ' "$D/out"
    ps -eo args | grep -v grep | grep -q "killed-run.gguf" # the private server runs
    [ -z "$(ps -eo args | grep -v grep | grep "killed-run.gguf" | grep -- --api-key)" ] # its key is not in ps
    kill -KILL $pid
    exec 8>&-
    for i in $(seq 1 600); do
        ps -eo args | grep -v grep | grep -q "killed-run.gguf" || break
        sleep 0.1
    done
    [ -z "$(ps -eo args | grep -v grep | grep "killed-run.gguf")" ]
}

@test "mfc run -i: /set parameter, two turns with history, /show, /clear, \"\"\" and /bye" {
    a1=$(ref_chat "Hello")
    a2=$(ref_chat "Hello" "$a1" "How are you")
    a3=$(ref_chat $'line one\nline two')
    printf '%s\n' '/set parameter seed 7' '/set parameter temperature' '/set parameter top_k x' \
        '/set parameter stop <a> <b>' '/show parameters' 'Hello' 'How are you' '/clear' \
        '"""line one' 'line two"""' '/nope' '/bye' 'never sent' |
        run_out -i toy
    cat "$BATS_TEST_TMPDIR/err"
    out=$(cat "$BATS_TEST_TMPDIR/out")
    echo "$out"
    [[ "$out" == *"Set parameter 'seed' to '7'"* ]]
    [[ "$out" == *"Usage:"* ]]                                     # a missing value
    [[ "$out" == *"'x' is not a valid value for top_k"* ]]
    # the model's own parameters (its Modelfile's), then the session's
    [[ "$out" == *"Model defined parameters:"*"num_predict"*"User defined parameters:"* ]]
    [[ "$out" == *'stop                           ["<a>","<b>"]'* ]]
    [[ "$out" == *"Cleared session context"* ]]
    [[ "$out" == *"Unknown command '/nope'"* ]]
    # each reply, the second one with the first turn as history, the third without
    python3 - "$BATS_TEST_TMPDIR/out" "$a1" "$a2" "$a3" <<'PY'
import sys
out = open(sys.argv[1], encoding="utf-8", errors="replace").read()
at = 0
for want in sys.argv[2:]:
    i = out.find(want + "\n", at)
    if i < 0 or out[i - 4:i] not in (">>> ", "... "):
        sys.exit(f"reply {want!r} not found in order after byte {at}")
    at = i + 1
PY
    [ "$(grep -c '^>>> ' <<<"$out")" -ge 10 ]
}

@test "mfc run: the stop parameter and num_predict reach the server" {
    printf '%s\n' '/set parameter num_predict 1' 'Hello' '/bye' | run_out -i toy --verbose
    cat "$BATS_TEST_TMPDIR/err"
    grep -q '^eval count: *1 token' "$BATS_TEST_TMPDIR/err"
}

@test "mfc run --adapter NAME talks to the image's named adapter" {
    D="$BATS_TEST_TMPDIR"
    cp "$BATS_FILE_TMPDIR/toy.gguf" "$D/"
    "$MKMODEL" -o "$D/sql.gguf" --preset toy --lora 8 --targets q,k,v,o,gate,up,down --lora-alpha 64 >/dev/null
    printf 'FROM ./toy.gguf\nADAPTER --name=sql ./sql.gguf\nPARAMETER temperature 0\nPARAMETER num_predict 6\n' >"$D/Modelfile"
    "$MFC" build -q -t toyl "$D" >/dev/null
    port=$(free_port)
    "$MFC" serve toyl -p "$port" --host 127.0.0.1 </dev/null >"$D/ref.log" 2>&1 &
    SERVE_PID=$!
    for i in $(seq 1 300); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/health" && break
        sleep 0.1
    done
    ask() {
        curl -sf "http://127.0.0.1:$port/api/chat" \
            -d "{\"model\":\"$1\",\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}]}" |
            jq -j .message.content
    }
    want=$(ask sql)
    base=$(ask toyl)
    serve_stop
    [ -n "$want" ]
    [ "$want" != "$base" ] # the adapter changes the answer, so the check below means something
    run_out --adapter sql toyl Hello there </dev/null
    [ "$(cat "$D/out")" = "$want" ]
    run "$MFC" run --adapter nope toyl Hi </dev/null
    [ "$status" -eq 1 ]
    [[ "$output" == *404* ]]
}

@test "mfc run: errors" {
    run "$MFC" run
    [ "$status" -eq 2 ]
    run "$MFC" run -i toy prompt
    [ "$status" -eq 2 ]
    run "$MFC" run no-such-image hi
    [ "$status" -eq 1 ]
    [[ "$output" == *no-such-image* ]]
    MFC_SERVE="$BATS_TEST_TMPDIR/none" run "$MFC" run toy hi
    [ "$status" -eq 1 ]
    [[ "$output" == *MFC_SERVE* ]]
}

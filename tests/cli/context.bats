#!/usr/bin/env bats
# context.bats: chats longer than the context. mfc-serve keeps the system
# prompt and the newest turns and drops the oldest (Ollama's behaviour) on
# /api/chat and /v1/chat/completions; a last message that cannot fit on its
# own is a 400 saying so; `mfc run -i` over a long piped chat answers every
# turn. A toy model with a 64-token context makes the cut come early.
load helpers
load serve_helpers

setup_file() {
    serve_model "$BATS_FILE_TMPDIR/ctx64.gguf" --ctx 64
}

teardown() {
    serve_stop || true
}

# A chat: system, 12 user/assistant turns, a last user message.
long_chat() {
    python3 -c '
import json
m = [{"role": "system", "content": "SYS"}]
for i in range(12):
    m += [{"role": "user", "content": f"turn {i} words words"}, {"role": "assistant", "content": f"answer {i}"}]
m.append({"role": "user", "content": "last"})
print(json.dumps(m))'
}

@test "a chat over the context drops its oldest turns, keeping the system prompt, on both APIs" {
    serve_start "$BATS_FILE_TMPDIR" ctx64.gguf --name toy
    msgs=$(long_chat)
    run curl -s "$SERVE_URL/api/chat" -d "{\"model\":\"toy\",\"stream\":false,\"messages\":$msgs,\"options\":{\"num_predict\":2}}"
    echo "$output"
    [ "$(jq -r .done <<<"$output")" = true ]
    n=$(jq -r .prompt_eval_count <<<"$output")
    [ "$n" -lt 64 ] && [ "$n" -gt 20 ]
    run curl -s "$SERVE_URL/v1/chat/completions" -d "{\"model\":\"toy\",\"max_tokens\":2,\"messages\":$msgs}"
    echo "$output"
    [ "$(jq -r .usage.prompt_tokens <<<"$output")" = "$n" ]
    # the kept prompt starts with the system message and ends with the last turn
    run curl -s "$SERVE_URL/tokenize" -d "{\"model\":\"toy\",\"messages\":$msgs}"
    grep -q 'dropped the oldest' "$SERVE_LOG"
    # the same chat shortened by hand to the kept turns renders the same prompt
    kept=$(grep -o 'dropped the oldest [0-9]*' "$SERVE_LOG" | head -1 | grep -o '[0-9]*$')
    short=$(jq -c --argjson k "$kept" '[.[0]] + .[1 + $k:]' <<<"$msgs")
    run curl -s "$SERVE_URL/api/chat" -d "{\"model\":\"toy\",\"stream\":false,\"messages\":$short,\"options\":{\"num_predict\":2}}"
    [ "$(jq -r .prompt_eval_count <<<"$output")" = "$n" ]
}

@test "a last message longer than the context is a 400 that says so" {
    serve_start "$BATS_FILE_TMPDIR" ctx64.gguf --name toy
    big=$(python3 -c 'print("word " * 200)')
    run curl -s -w '\n%{http_code}' "$SERVE_URL/v1/chat/completions" \
        -d "{\"model\":\"toy\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"user\",\"content\":\"$big\"}]}"
    echo "$output"
    [ "$(tail -1 <<<"$output")" = 400 ]
    grep -q "maximum context length is 64 tokens; the last message" <<<"$output"
    run curl -s -w '\n%{http_code}' "$SERVE_URL/api/chat" \
        -d "{\"model\":\"toy\",\"stream\":false,\"messages\":[{\"role\":\"user\",\"content\":\"$big\"}]}"
    [ "$(tail -1 <<<"$output")" = 400 ]
}

@test "mfc run -i over a long piped chat answers every turn" {
    export MFC_SERVE="$MFC_SERVE_BIN"
    for i in $(seq 1 25); do echo "question number $i with some words"; done |
        "$MFC" run -i "$BATS_FILE_TMPDIR/ctx64.gguf" >"$BATS_TEST_TMPDIR/out" 2>"$BATS_TEST_TMPDIR/err"
    cat "$BATS_TEST_TMPDIR/err"
    ! grep -q 'Error' "$BATS_TEST_TMPDIR/err"
    # 25 prompts, each followed by an answer
    [ "$(grep -c '^>>> ' "$BATS_TEST_TMPDIR/out")" -ge 25 ]
}

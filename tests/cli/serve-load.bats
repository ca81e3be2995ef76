#!/usr/bin/env bats
# serve-load.bats: mfc-serve under load, loopback only, bounded (each client
# has a 60 s timeout; the whole file takes seconds on a toy model).
# tests/tools/node/stream-load.mjs runs N concurrent streaming clients over
# plain fetch and checks the SSE / NDJSON framing of every response.
#  - 64 concurrent streams complete with correct framing (OpenAI SSE and Ollama NDJSON);
#  - with a KV cache of a few blocks every request completes (the engine
#    preempts) or gets 429 + Retry-After, the server neither crashes nor hangs;
#  - with a request cap, the excess gets 429 + Retry-After and the rest completes;
#  - clients that disconnect mid-stream leave nothing behind (/metrics: no
#    running or waiting request, no KV block in use).
load helpers
load serve_helpers

setup_file() {
    serve_model "$BATS_FILE_TMPDIR/toy.gguf"
}

teardown() {
    serve_stop || true
}

load_clients() {
    run node "$NODE_TOOLS/stream-load.mjs" --base "$SERVE_URL" --model toy "$@"
    echo "$output"
}

# Waits up to 60 s for the server to be idle: nothing running, waiting or in
# flight, no KV block used.
expect_idle() {
    local i
    for i in $(seq 1 600); do
        if [ "$(metric mfc:num_requests_running)" = 0 ] && [ "$(metric mfc:num_requests_waiting)" = 0 ] &&
            [ "$(metric mfc:kv_cache_blocks_used)" = 0 ] && [ "$(metric mfc:http_requests_in_flight)" = 0 ]; then
            [ "$(metric mfc:kv_cache_usage_perc)" = 0 ]
            return
        fi
        sleep 0.1
    done
    curl -s "$SERVE_URL/metrics" | grep -v '^#' | grep -v bucket
    false
}

@test "64 concurrent streaming clients all complete with correct SSE and NDJSON framing" {
    command -v node >/dev/null || skip "node is not installed"
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy
    load_clients --clients 64 --max-tokens 24
    [ "$status" -eq 0 ]
    [ "$(jq .ok <<<"$output")" = 64 ]
    [ "$(jq .tokens <<<"$output")" -ge 64 ]
    load_clients --clients 64 --max-tokens 24 --api ollama
    [ "$status" -eq 0 ]
    [ "$(jq .ok <<<"$output")" = 64 ]
    expect_idle
    [ "$(metric 'mfc:request_success_total{finished_reason="length"')" -ge 1 ] ||
        [ "$(metric 'mfc:request_success_total{finished_reason="stop"')" -ge 1 ]
    serve_stop # SIGTERM: drains and exits 0
}

@test "a tiny KV cache: every one of 64 streams completes or gets 429, no crash, no hang" {
    command -v node >/dev/null || skip "node is not installed"
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy --kv-cache-gb 0.0001
    grep -q ' 6 KV blocks' "$SERVE_LOG" # the cache holds 96 tokens: 6 blocks of 16
    load_clients --clients 64 --max-tokens 64 --allow-429
    [ "$status" -eq 0 ]
    [ "$(jq '.ok + .rejected' <<<"$output")" = 64 ]
    [ "$(jq .failed <<<"$output")" = 0 ]
    [ "$(jq .ok <<<"$output")" -ge 1 ]
    curl -sf "$SERVE_URL/health"
    expect_idle
    echo "preemptions: $(metric mfc:num_preemptions_total)"
    [ "$(metric mfc:num_preemptions_total)" -ge 1 ] # the cache was really too small
    serve_stop
}

@test "over MFC_MAX_REQUESTS: 429 with Retry-After, the others complete" {
    command -v node >/dev/null || skip "node is not installed"
    MFC_MAX_REQUESTS=8 serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy
    load_clients --clients 64 --max-tokens 200 --allow-429
    [ "$status" -eq 0 ]
    [ "$(jq '.ok + .rejected' <<<"$output")" = 64 ]
    [ "$(jq .rejected <<<"$output")" -ge 1 ]
    [ "$(jq .ok <<<"$output")" -ge 8 ]
    expect_idle
    serve_stop
}

@test "clients that disconnect mid-stream leave no request and no KV block behind" {
    command -v node >/dev/null || skip "node is not installed"
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy
    load_clients --clients 32 --max-tokens 400 --abort-after 3
    [ "$status" -eq 0 ]
    [ "$(jq .aborted <<<"$output")" = 32 ]
    load_clients --clients 32 --max-tokens 400 --abort-after 2 --api ollama
    [ "$status" -eq 0 ]
    [ "$(jq .aborted <<<"$output")" = 32 ]
    expect_idle
    # the server noticed: those requests ended as aborted, not as finished
    [ "$(metric 'mfc:request_success_total{finished_reason="abort"')" -ge 1 ]
    # and still serves
    load_clients --clients 4 --max-tokens 8
    [ "$status" -eq 0 ]
    serve_stop
}

#!/usr/bin/env bats
# loadgen.bats: bench/loadgen (the HTTP serving benchmark's client) against a
# real mfc-serve on the CPU with mkmodel's toy llama, on loopback; seconds.
#  - --requests mode: every request streams to its end; the JSON's counts
#    equal what the server's /metrics counted (tokens, finished by length);
#  - timed mode: the window's end cuts streaming requests, the server
#    cancels them (idle afterwards), tokens/s and percentiles are reported;
#  - failures are reported, not hidden: HTTP errors with the server's
#    message, a refused connection, a wrong API key, bad options;
#  - bench/serve-gpu's phases that need no GPU (the GGUFs, mfc-serve under
#    every load, the table) with a toy model on the CPU.
load helpers
load serve_helpers

LOADGEN="$MFC_BUILDDIR/bench/loadgen"

setup_file() {
    serve_model "$BATS_FILE_TMPDIR/toy.gguf"
}

teardown() {
    serve_stop || true
}

@test "loadgen --requests: every stream ends by length, counts match the server's /metrics" {
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy
    run "$LOADGEN" --url "$SERVE_URL" --model toy --clients 4 --requests 3 --prompt-tokens 24 \
        --max-tokens 8 --ids 3:500 --label cpu-toy
    echo "$output"
    [ "$status" -eq 0 ]
    json=$(grep '^{' <<<"$output")
    [ "$(jq -r .label <<<"$json")" = cpu-toy ]
    [ "$(jq .mode <<<"$json")" = '"requests"' ]
    [ "$(jq .requests_done <<<"$json")" = 12 ]
    [ "$(jq .finish_length <<<"$json")" = 12 ]
    [ "$(jq .errors <<<"$json")" = 0 ]
    [ "$(jq .output_tokens <<<"$json")" = 96 ] # 12 x 8, from usage.completion_tokens
    [ "$(jq .ttft_ms.n <<<"$json")" = 12 ]
    [ "$(jq .tpot_ms.n <<<"$json")" = 12 ]
    jq -e '.output_tok_s > 0 and .ttft_ms.p50 > 0 and .ttft_ms.p50 <= .ttft_ms.p99 and
           .tpot_ms.p50 > 0 and .tpot_ms.p90 <= .tpot_ms.p99' <<<"$json"
    # the table line names the run
    grep -q 'cpu-toy .*C=4 .*24/8 .*tok/s.*TTFT.*TPOT.*(12 done, 0 cut, 0 errors)' <<<"$output"
    # the server saw exactly these prompts and outputs
    [ "$(metric 'mfc:request_success_total{finished_reason="length"')" = 12 ]
    [ "$(metric mfc:prompt_tokens_total)" = 288 ]
    # the CPU's prefill cap beside decodes (runtime/serve/serve.h)
    grep -q "steps of up to 512 tokens, 64 sequences; prompts take up to 64 of them beside decodes (MFC_MAX_PREFILL_TOKENS, the backend's default)" "$SERVE_LOG"
}

@test "loadgen timed mode: the window's end cuts streams, the server cancels them" {
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy --max-prefill-tokens 0 --max-batch-tokens 256
    grep -q "steps of up to 256 tokens, 64 sequences; prompts take up to 256 of them beside decodes (MFC_MAX_PREFILL_TOKENS)" "$SERVE_LOG"
    run "$LOADGEN" --url "$SERVE_URL/" --clients 3 --warmup 0.2 --duration 0.6 --prompt-tokens 16 \
        --max-tokens 490 --ids 3:500
    echo "$output"
    [ "$status" -eq 0 ]
    json=$(grep '^{' <<<"$output")
    [ "$(jq .mode <<<"$json")" = '"timed"' ]
    jq -e '.window_s > 0.55 and .window_s < 0.65 and .output_tokens > 0 and .errors == 0' <<<"$json"
    [ "$(jq .requests_cut <<<"$json")" -ge 3 ]
    jq -e '.tpot_ms.n >= 1 and .tpot_ms.p50 > 0' <<<"$json"
    # every cut stream is cancelled: nothing left running after a moment
    for _ in $(seq 1 100); do
        [ "$(metric mfc:num_requests_running)" = 0 ] && break
        sleep 0.1
    done
    [ "$(metric mfc:num_requests_running)" = 0 ]
    [ "$(metric 'mfc:request_success_total{finished_reason="abort"')" -ge 3 ]
}

@test "loadgen reports failures: HTTP errors, a wrong key, a refused connection, bad options" {
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy --api-key s3cret
    run "$LOADGEN" --url "$SERVE_URL" --requests 1 --prompt-tokens 4 --max-tokens 2 --ids 3:500 \
        --api-key s3cret
    [ "$status" -eq 0 ]
    run "$LOADGEN" --url "$SERVE_URL" --requests 1 --prompt-tokens 4 --max-tokens 2 --ids 3:500
    echo "$output"
    [ "$status" -eq 1 ]
    grep -q 'loadgen: 1 request(s) failed; the first: HTTP 401' <<<"$output"
    [ "$(grep '^{' <<<"$output" | jq .errors)" = 1 ]
    # ids past the vocabulary: the server's 400 message comes through
    run "$LOADGEN" --url "$SERVE_URL" --requests 1 --prompt-tokens 4 --max-tokens 2 --ids 600:700 \
        --api-key s3cret
    echo "$output"
    [ "$status" -eq 1 ]
    grep -q 'HTTP 400: .*token' <<<"$output"
    run "$LOADGEN" --url "$SERVE_URL" --path /v1/nothing --requests 1 --api-key s3cret
    [ "$status" -eq 1 ]
    grep -q 'HTTP 404' <<<"$output"
    serve_stop
    port=$(free_port)
    run "$LOADGEN" --url "http://127.0.0.1:$port" --clients 2 --requests 5
    echo "$output"
    [ "$status" -eq 1 ]
    grep -q "connecting to 127.0.0.1:$port: Connection refused" <<<"$output"
    [ "$(grep '^{' <<<"$output" | jq .errors)" = 2 ] # each client stops at its first failure
    run "$LOADGEN" --url https://example.com
    [ "$status" -eq 2 ]
    grep -q 'only http:// URLs are supported' <<<"$output"
    run "$LOADGEN" --clients 0
    [ "$status" -eq 2 ]
    grep -q -- '--clients "0": expected a number from 1 to 4096' <<<"$output"
    run "$LOADGEN" --ids 9:3
    [ "$status" -eq 2 ]
    grep -q 'HI must be above LO' <<<"$output"
    run "$LOADGEN" --bogus 1
    [ "$status" -eq 2 ]
    grep -q 'unknown option --bogus' <<<"$output"
}

@test "bench/serve-gpu's phases run on the CPU with a toy model: GGUFs, mfc-serve under load, the table" {
    export SERVE_GPU_DIR="$BATS_TEST_TMPDIR/sg" SERVE_GPU_PRESET=toy SERVE_GPU_TYPES=q8_0
    export SERVE_GPU_CLIENTS="2 3" SERVE_GPU_LOADS=24/8 SERVE_GPU_WARMUP=0.3 SERVE_GPU_DURATION=0.8
    export SERVE_GPU_PORT=$(free_port) MKMODEL="$MFC_BUILDDIR/tests/tools/mkmodel"
    run "$MFC_SRCDIR/bench/serve-gpu" models
    echo "$output"
    [ "$status" -eq 0 ]
    [ -s "$SERVE_GPU_DIR/toy-q8_0.gguf" ]
    MFC_DEVICE=cpu MFC_THREADS=1 MFC_SERVE="$MFC_SERVE_BIN" run "$MFC_SRCDIR/bench/serve-gpu" mfc
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(wc -l <"$SERVE_GPU_DIR/results.jsonl")" = 2 ]
    jq -e -s 'all(.server == "mfc" and .type == "q8_0" and .errors == 0 and .output_tok_s > 0)' \
        "$SERVE_GPU_DIR/results.jsonl"
    echo '{"device":"none","copy_gbps":20.0}' >"$SERVE_GPU_DIR/copybw.json"
    run "$MFC_SRCDIR/bench/serve-gpu" table
    echo "$output"
    [ "$status" -eq 0 ]
    grep -q 'copy bandwidth 20 GB/s (none)' <<<"$output"
    grep -q 'MFC_DEVICE=cpu' <<<"$output"
    [ "$(grep -c '^| mfc | Q8_0 | [23] | 24 / 8 | [0-9,]* | - | [0-9]*% of [0-9,]* |' <<<"$output")" = 2 ]
    run "$MFC_SRCDIR/bench/serve-gpu" llama
    [ "$status" -eq 1 ]
    grep -q 'no llama-server at .*: run bench/serve-gpu llama-build' <<<"$output"
}

#!/usr/bin/env bats
# serve.bats: mfc-serve over HTTP with curl, on mkmodel's toy llamas: every
# endpoint (OpenAI, Ollama, health, metrics, tokenize), their framing (SSE
# with [DONE], NDJSON ending done:true), the error paths (400 naming the
# field, 401, 404, 405, 413, 429 with Retry-After), a client disconnect
# freeing its KV blocks, and the SIGTERM drain (/health 503 "draining"
# while the in-flight stream finishes). Servers listen on port 0
# (the kernel picks a free one; the log says which) and are killed in
# teardown.

load helpers

SERVE="${MFC_BUILDDIR:-$BATS_TEST_DIRNAME/../..}/mfc-serve"
MKMODEL="${MFC_BUILDDIR:-$BATS_TEST_DIRNAME/../..}/tests/tools/mkmodel"

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    "$MKMODEL" -o "$D/toy.gguf" --preset toy >/dev/null
    "$MKMODEL" -o "$D/toy-lora.gguf" --preset toy --lora 4 --targets q,v --lora-alpha 64 >/dev/null
    # slower: 4 layers 1024 wide, about 400 tokens/s on one thread
    "$MKMODEL" -o "$D/slow.gguf" --preset toy --layers 4 --embd 1024 --ff 2816 --heads 8 \
        --kv-heads 8 --ctx 2048 --type q8_0 >/dev/null
    mkdir -p "$D/etc"
    cat >"$D/etc/model.yaml" <<EOF
schema: "mfc.config/v1"
model:
  path: "../toy.gguf"
adapters:
  - name: "ad1"
    scale: 1
    path: "../toy-lora.gguf"
params:
  temperature: 0
  top_k: 1
  stop:
    - "never-matches-xyz"
template: "{{ if .System }}S:{{ .System }} {{ end }}U:{{ .Prompt }} A:"
system: "be brief"
messages: []
license:
  - "MIT"
EOF
    start_server MAIN --config "$D/etc/model.yaml" --name toy
    echo "$PORT" >"$D/main.port"
}

teardown_file() {
    stop_all
}

teardown() {
    for f in "$BATS_TEST_TMPDIR"/*.pid; do
        [ -e "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
    done
    if [ -d "$BATS_TEST_TMPDIR/podman" ]; then # the podman test's container
        podman --root "$BATS_TEST_TMPDIR/podman" --runroot "$BATS_TEST_TMPDIR/podman-run" \
            --storage-driver=vfs --runtime runc --cgroup-manager=cgroupfs \
            --events-backend=none rm -f -t 0 served >/dev/null 2>&1
    fi
    true
}

# start_server NAME ARGS...: starts mfc-serve on a free port, waits for
# ready; sets PORT and writes $D/NAME.pid (killed by stop_all / teardown).
start_server() {
    local name=$1
    shift
    local log="$D/$name.log"
    "$SERVE" --port 0 --threads 1 "$@" 2>"$log" &
    echo $! >"$D/$name.pid"
    for _ in $(seq 1 1200); do
        if grep -q 'ready: model' "$log"; then
            PORT=$(grep -o 'listening on http://[^ ]*' "$log" | grep -o '[0-9]*$')
            return 0
        fi
        kill -0 "$(cat "$D/$name.pid")" 2>/dev/null || break
        sleep 0.05
    done
    cat "$log"
    return 1
}

stop_all() {
    for f in "$D"/*.pid; do
        [ -e "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
        rm -f "$f"
    done
    true
}

main_url() {
    echo "http://127.0.0.1:$(cat "$D/main.port")"
}

# post PATH BODY: prints "status" on the first line, then the body
post() {
    curl -s -o "$BATS_TEST_TMPDIR/body" -w '%{http_code}' -H 'Content-Type: application/json' \
        "$(main_url)$1" -d "$2"
    echo
    cat "$BATS_TEST_TMPDIR/body"
}

@test "serve: / and /health and /api/version" {
    run curl -s "$(main_url)/"
    [ "$output" = "mfc is running" ]
    run curl -s -w ' %{http_code}' "$(main_url)/health"
    [ "$output" = '{"status":"ok"} 200' ]
    run curl -s "$(main_url)/api/version"
    echo "$output" | jq -e '.version | length > 0'
}

@test "serve: 503 while the model loads" {
    # a FIFO as the model: opening it blocks, so the server stays in loading
    mkfifo "$D/fifo.gguf"
    "$SERVE" --model "$D/fifo.gguf" --port 0 2>"$D/LOADING.log" &
    echo $! >"$D/LOADING.pid"
    for _ in $(seq 1 600); do
        grep -q 'listening on' "$D/LOADING.log" && break
        sleep 0.05
    done
    local u="http://127.0.0.1:$(grep -o 'listening on http://[^ ]*' "$D/LOADING.log" | grep -o '[0-9]*$')"
    run curl -s -w ' %{http_code}' "$u/health"
    [ "$output" = '{"status":"loading"} 503' ]
    run curl -s -w '\n%{http_code}' "$u/v1/chat/completions" -d '{}'
    [ "${lines[1]}" = 503 ]
    echo "${lines[0]}" | jq -e '.error.code == "service_unavailable"'
    run curl -s "$u/"
    [ "$output" = "mfc is running" ]
    # SIGTERM while loading ends it at once, exit 0
    local pid st=0
    pid=$(cat "$D/LOADING.pid")
    kill -TERM "$pid"
    wait "$pid" || st=$?
    [ "$st" -eq 0 ]
    grep -q 'SIGTERM while loading' "$D/LOADING.log"
}

@test "serve: --help, bad flags and a missing model" {
    run "$SERVE" --help
    [ "$status" -eq 0 ]
    [[ "$output" == *"--model FILE.gguf"* ]]
    run "$SERVE" --port nope --model x.gguf
    [ "$status" -eq 2 ]
    [[ "$output" == *'port "nope"'* ]]
    run "$SERVE"
    [ "$status" -eq 2 ]
    [[ "$output" == *"no model"* ]]
    run env MFC_DEVICE=tpu "$SERVE" --model x.gguf
    [ "$status" -eq 2 ]
    [[ "$output" == *"MFC_DEVICE \"tpu\""* ]]
    run "$SERVE" --model "$D/missing.gguf" --port 0
    [ "$status" -eq 1 ]
    [[ "$output" == *"missing.gguf"* ]]
    # a port in use is an error, not a second server sharing it
    run "$SERVE" --model "$D/toy.gguf" --port "$(cat "$D/main.port")"
    [ "$status" -eq 1 ]
    [[ "$output" == *"cannot listen on 0.0.0.0:$(cat "$D/main.port")"* ]]
}

@test "serve: MFC_KV_CACHE_TYPE=q8 on the CPU keeps F16 and says so; a bad type is a usage error" {
    run env MFC_KV_CACHE_TYPE=q4 "$SERVE" --model "$D/toy.gguf"
    [ "$status" -eq 2 ]
    [[ "$output" == *'KV cache type "q4": expected f16 or q8'* ]]
    MFC_DEVICE=cpu MFC_KV_CACHE_TYPE=q8 start_server KV8 --model "$D/toy.gguf" --name toy
    grep -q 'MFC_KV_CACHE_TYPE=q8 needs the CUDA backend: K/V stay F16 on the cpu' "$D/KV8.log"
    grep -q 'compute backend: cpu (MFC_DEVICE=cpu), KV cache F16' "$D/KV8.log"
    # it answers as the F16 server does
    run curl -s "http://127.0.0.1:$PORT/v1/completions" -d '{"prompt":"hello","max_tokens":6,"temperature":0,"ignore_eos":true}'
    local a
    a=$(echo "$output" | jq -r '.choices[0].text')
    run curl -s "$(main_url)/v1/completions" -d '{"model":"toy","prompt":"hello","max_tokens":6,"temperature":0,"ignore_eos":true}'
    [ -n "$a" ]
    [ "$(echo "$output" | jq -r '.choices[0].text')" = "$a" ]
}

@test "serve: --model-offset serves a GGUF inside a tar in place" {
    head -c 3000 /dev/urandom >"$D/pad.bin"
    tar -C "$D" -cf "$D/layer.tar" pad.bin toy.gguf
    local off size
    read -r off size < <(python3 -c 'import sys, tarfile
m = tarfile.open(sys.argv[1]).getmember("toy.gguf")
print(m.offset_data, m.size)' "$D/layer.tar")
    run "$SERVE" --help
    [[ "$output" == *"--model-offset"* ]]
    start_server RANGE --model "$D/layer.tar" --model-offset "$off" --model-size "$size" --name toy
    local u="http://127.0.0.1:$PORT"
    run curl -s "$u/v1/completions" -d '{"prompt":"hello","max_tokens":6,"temperature":0,"ignore_eos":true}'
    local a
    a=$(echo "$output" | jq -r '.choices[0].text')
    run curl -s "$(main_url)/v1/completions" -d '{"model":"toy","prompt":"hello","max_tokens":6,"temperature":0,"ignore_eos":true}'
    [ "$(echo "$output" | jq -r '.choices[0].text')" = "$a" ]
    kill "$(cat "$D/RANGE.pid")"
    run "$SERVE" --model "$D/layer.tar" --model-offset "$off" --model-size 999999999999 --port 0
    [ "$status" -eq 1 ]
    [[ "$output" == *"lies past"* ]]
}

@test "serve: an adapter inside a bigger file (PATH@OFFSET:SIZE, yaml offset/size) answers like the file" {
    head -c 3000 /dev/urandom >"$D/apad.bin"
    tar -C "$D" -cf "$D/alayer.tar" apad.bin toy-lora.gguf
    local off size
    read -r off size < <(python3 -c 'import sys, tarfile
m = tarfile.open(sys.argv[1]).getmember("toy-lora.gguf")
print(m.offset_data, m.size)' "$D/alayer.tar")
    [ "$off" -gt 0 ]
    local body='{"model":"MODEL","prompt":"hello","max_tokens":8,"temperature":0,"ignore_eos":true}'
    run curl -s "$(main_url)/v1/completions" -d "${body/MODEL/ad1}"
    local want
    want=$(echo "$output" | jq -r '.choices[0].text')
    run curl -s "$(main_url)/v1/completions" -d "${body/MODEL/toy}"
    [ "$want" != "$(echo "$output" | jq -r '.choices[0].text')" ] # the adapter matters
    # on the command line
    start_server AR --model "$D/toy.gguf" --name toy --adapter "ad1=$D/alayer.tar@$off:$size"
    run curl -s "http://127.0.0.1:$PORT/v1/completions" -d "${body/MODEL/ad1}"
    [ "$(echo "$output" | jq -r '.choices[0].text')" = "$want" ]
    grep -q "alayer.tar" "/proc/$(cat "$D/AR.pid")/maps" # mapped in place
    kill "$(cat "$D/AR.pid")"
    # in model.yaml, next to path:
    sed -e "s|path: \"../toy-lora.gguf\"|path: \"../alayer.tar\"\n    offset: $off\n    size: $size|" \
        "$D/etc/model.yaml" >"$D/etc/range.yaml"
    grep -q "offset: $off" "$D/etc/range.yaml"
    start_server AY --config "$D/etc/range.yaml" --name toy
    run curl -s "http://127.0.0.1:$PORT/v1/completions" -d "${body/MODEL/ad1}"
    [ "$(echo "$output" | jq -r '.choices[0].text')" = "$want" ]
    kill "$(cat "$D/AY.pid")"
    # a range past the end of the file is refused, naming it
    local total
    total=$(stat -c %s "$D/alayer.tar")
    run "$SERVE" --model "$D/toy.gguf" --port 0 --adapter "ad1=$D/alayer.tar@$off:$total"
    [ "$status" -eq 1 ]
    [[ "$output" == *"adapter ad1"*"alayer.tar"*"offset $off of $total bytes lies past the end of the file ($total bytes)"* ]]
    run "$SERVE" --model "$D/toy.gguf" --port 0 --adapter "ad1=$D/alayer.tar@$((total + 1)):0"
    [ "$status" -eq 1 ]
    [[ "$output" == *"lies past the end of the file"* ]]
    # a range that is not the adapter's GGUF fails to parse, not to map
    run "$SERVE" --model "$D/toy.gguf" --port 0 --adapter "ad1=$D/alayer.tar@0:$size"
    [ "$status" -eq 1 ]
    [[ "$output" == *"alayer.tar"* ]]
}

@test "serve: /v1/models lists the base and the named adapter" {
    run curl -s "$(main_url)/v1/models"
    echo "$output" | jq -e '.object == "list" and ([.data[].id] == ["toy", "ad1"])'
    echo "$output" | jq -e '.data[1].parent == "toy"'
    run curl -s "$(main_url)/v1/models/ad1"
    echo "$output" | jq -e '.id == "ad1" and .object == "model"'
    run curl -s -w '\n%{http_code}' "$(main_url)/v1/models/nope"
    [ "${lines[1]}" = 404 ]
    echo "${lines[0]}" | jq -e '.error.code == "model_not_found"'
}

@test "serve: chat completion, whole response" {
    run post /v1/chat/completions \
        '{"model":"toy","messages":[{"role":"user","content":"hi"}],"max_tokens":5,"ignore_eos":true}'
    [ "${lines[0]}" = 200 ]
    echo "${lines[1]}" | jq -e '.object == "chat.completion" and (.id | startswith("chatcmpl-"))'
    echo "${lines[1]}" | jq -e '.choices[0].message.role == "assistant" and .choices[0].finish_reason == "length"'
    echo "${lines[1]}" | jq -e '.usage.completion_tokens == 5 and .usage.total_tokens == .usage.prompt_tokens + 5'
}

@test "serve: chat streaming is SSE ending with [DONE], usage when asked" {
    run curl -sN "$(main_url)/v1/chat/completions" -d \
        '{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}'
    [ "$status" -eq 0 ]
    # every line is "data: ..." or empty, and events are separated by blank lines
    [ -z "$(printf '%s\n' "$output" | grep -v '^data: ' | grep -v '^$')" ]
    [ "${lines[-1]}" = "data: [DONE]" ]
    local chunks
    chunks=$(printf '%s\n' "$output" | grep '^data: {' | sed 's/^data: //')
    echo "$chunks" | head -1 | jq -e '.object == "chat.completion.chunk" and .choices[0].delta.role == "assistant"'
    echo "$chunks" | jq -s -e '[.[] | select(.choices[0].finish_reason == "length")] | length == 1'
    echo "$chunks" | tail -1 | jq -e '.choices == [] and .usage.completion_tokens == 4'
    [ "$(echo "$chunks" | jq -s '[.[].id] | unique | length')" = 1 ]
}

@test "serve: completions with n, seed, temperature 0 and stop" {
    run post /v1/completions '{"prompt":"hello","max_tokens":8,"temperature":0,"ignore_eos":true}'
    [ "${lines[0]}" = 200 ]
    local greedy
    greedy=$(echo "${lines[1]}" | jq -r '.choices[0].text')
    echo "${lines[1]}" | jq -e '.object == "text_completion"'
    run post /v1/completions '{"prompt":"hello","max_tokens":8,"temperature":0,"ignore_eos":true}'
    [ "$(echo "${lines[1]}" | jq -r '.choices[0].text')" = "$greedy" ]
    # seeded sampling: same seed, same text; n gives n choices
    run post /v1/completions '{"prompt":"hello","max_tokens":8,"temperature":1,"seed":7,"n":2}'
    echo "${lines[1]}" | jq -e '(.choices | length) == 2 and .choices[1].index == 1'
    local a
    a=$(echo "${lines[1]}" | jq -c '[.choices[].text]')
    run post /v1/completions '{"prompt":"hello","max_tokens":8,"temperature":1,"seed":7,"n":2}'
    [ "$(echo "${lines[1]}" | jq -c '[.choices[].text]')" = "$a" ]
    # a stop string taken from the greedy text cuts it there
    local stop=${greedy:4:3}
    [ -n "$stop" ]
    run post /v1/completions "$(jq -nc --arg s "$stop" '{prompt:"hello",max_tokens:8,temperature:0,ignore_eos:true,stop:[$s]}')"
    echo "${lines[1]}" | jq -e '.choices[0].finish_reason == "stop"'
    local cut
    cut=$(echo "${lines[1]}" | jq -r '.choices[0].text')
    [ "$cut" = "${greedy%%"$stop"*}" ]
    # streamed, the deltas add up to the same cut text: held-back text never leaks
    run curl -sN "$(main_url)/v1/completions" -d "$(jq -nc --arg s "$stop" '{prompt:"hello",max_tokens:8,temperature:0,ignore_eos:true,stop:[$s],stream:true}')"
    local joined
    joined=$(printf '%s\n' "$output" | grep '^data: {' | sed 's/^data: //' | jq -j '.choices[0].text')
    [ "$joined" = "$cut" ]
    printf '%s\n' "$output" | grep '^data: {' | sed 's/^data: //' | jq -s -e '.[-1].choices[0].finish_reason == "stop"'
}

@test "serve: completions from token ids and logprobs" {
    run post /v1/completions '{"prompt":[1,72,105],"max_tokens":3,"logprobs":2,"ignore_eos":true}'
    [ "${lines[0]}" = 200 ]
    echo "${lines[1]}" | jq -e '.usage.prompt_tokens == 3'
    echo "${lines[1]}" | jq -e '.choices[0].logprobs.token_logprobs | length == 3 and all(. <= 0)'
    echo "${lines[1]}" | jq -e '.choices[0].logprobs.top_logprobs[0] | length == 2'
    echo "${lines[1]}" | jq -e '.choices[0].logprobs.text_offset | .[0] == 0 and .[1] > 0 and .[2] > .[1]'
    run post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"logprobs":true,"top_logprobs":3,"ignore_eos":true}'
    echo "${lines[1]}" | jq -e '.choices[0].logprobs.content | length == 2'
    echo "${lines[1]}" | jq -e '.choices[0].logprobs.content[0].top_logprobs | length == 3'
}

@test "serve: the request's model selects the adapter" {
    local body='{"model":"MODEL","prompt":"hello","max_tokens":12,"temperature":0,"ignore_eos":true}'
    run post /v1/completions "${body/MODEL/toy}"
    local base
    base=$(echo "${lines[1]}" | jq -r '.choices[0].text')
    run post /v1/completions "${body/MODEL/ad1}"
    [ "${lines[0]}" = 200 ]
    echo "${lines[1]}" | jq -e '.model == "ad1"'
    [ "$(echo "${lines[1]}" | jq -r '.choices[0].text')" != "$base" ]
    run post /v1/completions "${body/MODEL/toy:latest}"
    [ "$(echo "${lines[1]}" | jq -r '.choices[0].text')" = "$base" ]
    run post /v1/completions "${body/MODEL/nope}"
    [ "${lines[0]}" = 404 ]
    echo "${lines[1]}" | jq -e '.error.type == "invalid_request_error" and .error.code == "model_not_found"'
    [[ "${lines[1]}" == *"nope"* ]]
}

@test "serve: OpenAI errors name the field" {
    run post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}'
    [ "${lines[0]}" = 400 ]
    echo "${lines[1]}" | jq -e '.error.param == "temperature" and .error.type == "invalid_request_error"'
    run post /v1/chat/completions '{"messages":[{"role":1,"content":"x"}]}'
    [ "${lines[0]}" = 400 ]
    echo "${lines[1]}" | jq -e '.error.param == "messages[0].role"'
    run post /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"n":99}'
    [ "${lines[0]}" = 400 ]
    echo "${lines[1]}" | jq -e '.error.param == "n"'
    run post /v1/chat/completions '{"messages": ['
    [ "${lines[0]}" = 400 ]
    echo "${lines[1]}" | jq -e '.error.message | test("request body")'
    run post /v1/completions '{"max_tokens":3}'
    [ "${lines[0]}" = 400 ]
    echo "${lines[1]}" | jq -e '.error.param == "prompt"'
    run post /v1/completions "$(jq -nc '{prompt: ("a " * 700)}')"
    [ "${lines[0]}" = 400 ]
    echo "${lines[1]}" | jq -e '.error.code == "context_length_exceeded"'
    run curl -s -w '\n%{http_code}' "$(main_url)/v1/chat/completions"
    [ "${lines[1]}" = 405 ]
    run curl -s -w '\n%{http_code}' "$(main_url)/v2/nothing"
    [ "${lines[1]}" = 404 ]
    echo "${lines[0]}" | jq -e '.error.code == "not_found"'
}

@test "serve: Ollama generate streams NDJSON ending done:true with context" {
    run curl -sN "$(main_url)/api/generate" -d '{"model":"toy","prompt":"hello","options":{"num_predict":5}}'
    [ "$status" -eq 0 ]
    printf '%s\n' "$output" | jq -e -s 'all(has("model") and has("created_at"))'
    echo "${lines[-1]}" | jq -e '.done == true and .done_reason == "length" and .eval_count == 5'
    echo "${lines[-1]}" | jq -e 'all(.total_duration, .load_duration, .prompt_eval_count, .prompt_eval_duration, .eval_duration; type == "number")'
    echo "${lines[-1]}" | jq -e '(.context | length) == .prompt_eval_count + 5'
    printf '%s\n' "${lines[@]:0:${#lines[@]}-1}" | jq -e -s 'all(.done == false)'
    # the template and system of model.yaml were applied: S:be brief U:hello A:
    run post /tokenize '{"prompt":"S:be brief U:hello A:"}'
    local n
    n=$(echo "${lines[1]}" | jq '.count')
    run post /api/generate '{"model":"toy","prompt":"hello","stream":false,"options":{"num_predict":2}}'
    [ "${lines[0]}" = 200 ]
    echo "${lines[1]}" | jq -e --argjson n "$n" '.prompt_eval_count == $n and .done == true and (.response | type == "string")'
    # raw skips the template; context continues a conversation
    local ctx
    ctx=$(echo "${lines[1]}" | jq -c '.context')
    run post /api/generate "{\"prompt\":\"more\",\"raw\":true,\"stream\":false,\"context\":$ctx,\"options\":{\"num_predict\":1}}"
    [ "${lines[0]}" = 200 ]
    echo "${lines[1]}" | jq -e --argjson c "$ctx" '.context[0:($c | length)] == $c'
    # an empty prompt only loads the model
    run post /api/generate '{"model":"toy"}'
    echo "${lines[1]}" | jq -e '.done == true and .done_reason == "load"'
}

@test "serve: Ollama chat, streaming and not" {
    run curl -sN "$(main_url)/api/chat" -d '{"model":"toy","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":3,"seed":1}}'
    echo "${lines[-1]}" | jq -e '.done == true and .message.role == "assistant" and .eval_count == 3'
    printf '%s\n' "$output" | jq -e -s 'all(.message.role == "assistant")'
    run post /api/chat '{"model":"toy","messages":[{"role":"user","content":"hi"}],"stream":false,"options":{"num_predict":3}}'
    [ "${lines[0]}" = 200 ]
    echo "${lines[1]}" | jq -e '.done == true and (.message.content | type == "string") and .done_reason == "length"'
    run post /api/chat '{"model":"toy","messages":[{"role":"user"}],"options":{"temperature":"x"}}'
    [ "${lines[0]}" = 400 ]
    echo "${lines[1]}" | jq -e '.error | test("options.temperature")'
    run post /api/chat '{"model":"other","messages":[]}'
    [ "${lines[0]}" = 404 ]
    echo "${lines[1]}" | jq -e '.error | type == "string"'
}

@test "serve: /api/tags, /api/show, /api/ps" {
    run curl -s "$(main_url)/api/tags"
    echo "$output" | jq -e '[.models[].name] == ["toy:latest", "ad1:latest"]'
    echo "$output" | jq -e '.models[0].details.format == "gguf" and .models[0].size > 0'
    run post /api/show '{"model":"toy"}'
    [ "${lines[0]}" = 200 ]
    echo "${lines[1]}" | jq -e '.template | startswith("{{ if .System }}")'
    echo "${lines[1]}" | jq -e '.parameters | test("temperature +0")'
    echo "${lines[1]}" | jq -e '.modelfile | test("FROM .*toy.gguf")'
    echo "${lines[1]}" | jq -e '.model_info["general.architecture"] == "llama" and .system == "be brief" and .license == "MIT"'
    run post /api/show '{"model":"missing"}'
    [ "${lines[0]}" = 404 ]
    run curl -s "$(main_url)/api/ps"
    echo "$output" | jq -e '.models[0].name == "toy:latest" and has("models")'
}

@test "serve: /tokenize and /detokenize round-trip" {
    run post /tokenize '{"prompt":"hello world","add_special_tokens":false}'
    [ "${lines[0]}" = 200 ]
    local toks
    toks=$(echo "${lines[1]}" | jq -c '.tokens')
    echo "${lines[1]}" | jq -e '.count == (.tokens | length) and .max_model_len == 512'
    run post /detokenize "{\"tokens\":$toks}"
    # the toy vocabulary is bytes: SPM's U+2581 comes back as itself
    echo "${lines[1]}" | jq -e '.prompt | gsub("\u2581"; " ") | ltrimstr(" ") == "hello world"'
    run post /tokenize '{"messages":[{"role":"user","content":"hi"}]}'
    echo "${lines[1]}" | jq -e '.count > 3'
    run post /detokenize '{"tokens":[99999]}'
    [ "${lines[0]}" = 400 ]
    echo "${lines[1]}" | jq -e '.error.param == "tokens[0]"'
}

@test "serve: /metrics is Prometheus text with mfc: names" {
    post /v1/completions '{"prompt":"hi","max_tokens":2}' >/dev/null
    run curl -s -D "$BATS_TEST_TMPDIR/h" "$(main_url)/metrics"
    grep -qi '^content-type: text/plain; version=0.0.4' "$BATS_TEST_TMPDIR/h"
    for m in num_requests_running num_requests_waiting kv_cache_usage_perc \
        prefix_cache_queries_total prefix_cache_hits_total prompt_tokens_total \
        generation_tokens_total num_preemptions_total; do
        echo "$output" | grep -q "^# TYPE mfc:$m "
        echo "$output" | grep -q "^mfc:$m{model_name=\"toy\"} "
    done
    echo "$output" | grep -q '^mfc:request_success_total{finished_reason="length",model_name="toy"} [1-9]'
    # every generated token was drawn on the device or on the host
    echo "$output" | awk '
        index($0, "mfc:tokens_sampled_total{where=") == 1 { n++; drawn += $2 }
        index($0, "mfc:generation_tokens_total{") == 1 { gen = $2 }
        END { exit !(n == 2 && drawn == gen && gen >= 2) }'
    for h in time_to_first_token_seconds inter_token_latency_seconds e2e_request_latency_seconds \
        request_queue_time_seconds; do
        echo "$output" | grep -q "^# TYPE mfc:$h histogram"
        echo "$output" | grep -q "^mfc:${h}_bucket{le=\"+Inf\",model_name=\"toy\"} [1-9]"
        echo "$output" | grep -q "^mfc:${h}_count{model_name=\"toy\"} [1-9]"
        # buckets are cumulative: never decreasing, +Inf equal to the count
        echo "$output" | awk -v h="mfc:${h}_" '
            index($0, h "bucket{") == 1 { if ($2 + 0 < last) bad = 1; last = $2 + 0; inf = $2 }
            index($0, h "count{") == 1 { count = $2 }
            END { exit (bad || inf != count) }'
    done
}

@test "serve: bearer auth with MFC_API_KEY" {
    MFC_API_KEY=sekrit start_server AUTH --model "$D/toy.gguf"
    local u="http://127.0.0.1:$PORT"
    run curl -s -w '\n%{http_code}' "$u/v1/models"
    [ "${lines[1]}" = 401 ]
    echo "${lines[0]}" | jq -e '.error.code == "invalid_api_key"'
    run curl -s -w '\n%{http_code}' -H 'Authorization: Bearer sekrix' "$u/v1/models"
    [ "${lines[1]}" = 401 ]
    run curl -s -w '\n%{http_code}' -H 'Authorization: Bearer sekrit' "$u/v1/models"
    [ "${lines[1]}" = 200 ]
    run curl -s -w '\n%{http_code}' "$u/api/tags"
    [ "${lines[1]}" = 401 ]
    echo "${lines[0]}" | jq -e '.error | type == "string"'
    run curl -s -w '\n%{http_code}' "$u/health"
    [ "${lines[1]}" = 200 ]
    kill "$(cat "$D/AUTH.pid")"
}

@test "serve: bodies over MFC_MAX_BODY get 413" {
    MFC_MAX_BODY=2048 start_server SMALL --model "$D/toy.gguf"
    local u="http://127.0.0.1:$PORT"
    run curl -s -w '\n%{http_code}' "$u/v1/completions" -d "$(jq -nc '{prompt: ("a" * 4000)}')"
    [ "${lines[-1]}" = 413 ]
    echo "${lines[0]}" | jq -e '.error.code == "request_too_large"'
    # chunked, no Content-Length: cut while reading
    run curl -s -w '\n%{http_code}' -H 'Transfer-Encoding: chunked' "$u/v1/completions" \
        -d "$(jq -nc '{prompt: ("a" * 4000)}')"
    [ "${lines[-1]}" = 413 ]
    kill "$(cat "$D/SMALL.pid")"
}

@test "serve: 429 with Retry-After past MFC_MAX_REQUESTS; a disconnect frees the KV blocks" {
    MFC_MAX_REQUESTS=1 start_server SLOW --model "$D/slow.gguf"
    local u="http://127.0.0.1:$PORT"
    curl -sN --max-time 2 "$u/v1/completions" \
        -d '{"prompt":"hi","max_tokens":1900,"ignore_eos":true,"stream":true}' >"$BATS_TEST_TMPDIR/s1" &
    echo $! >"$BATS_TEST_TMPDIR/c1.pid"
    for _ in $(seq 1 600); do
        [ -s "$BATS_TEST_TMPDIR/s1" ] && break
        sleep 0.05
    done
    run curl -s -D "$BATS_TEST_TMPDIR/h" -w '\n%{http_code}' "$u/v1/completions" -d '{"prompt":"x","max_tokens":1}'
    [ "${lines[-1]}" = 429 ]
    grep -qi '^retry-after: 1' "$BATS_TEST_TMPDIR/h"
    echo "${lines[0]}" | jq -e '.error.type == "rate_limit_error"'
    run curl -s "$u/metrics"
    echo "$output" | grep -q '^mfc:num_requests_running{model_name="slow"} 1'
    # curl gives up after 2 s mid-stream: the request is cancelled, blocks freed
    wait "$(cat "$BATS_TEST_TMPDIR/c1.pid")" || true
    head -1 "$BATS_TEST_TMPDIR/s1" | grep -q '^data: {'
    run grep -c 'DONE' "$BATS_TEST_TMPDIR/s1"
    [ "$output" = 0 ]
    local ok=0
    for _ in $(seq 1 400); do
        run curl -s "$u/metrics"
        if echo "$output" | grep -q '^mfc:num_requests_running{model_name="slow"} 0' &&
            echo "$output" | grep -q '^mfc:kv_cache_blocks_used{model_name="slow"} 0' &&
            echo "$output" | grep -q '^mfc:kv_cache_usage_perc{model_name="slow"} 0' &&
            echo "$output" | grep -q '^mfc:http_requests_in_flight{model_name="slow"} 0'; then
            ok=1
            break
        fi
        sleep 0.05
    done
    [ "$ok" = 1 ]
    echo "$output" | grep -q '^mfc:request_success_total{finished_reason="abort",model_name="slow"} 1'
    grep -q 'access method=POST path=/v1/completions status=200 .* aborted=1' "$D/SLOW.log"
    # and the server takes work again
    run curl -s -w '\n%{http_code}' "$u/v1/completions" -d '{"prompt":"x","max_tokens":1}'
    [ "${lines[-1]}" = 200 ]
    kill "$(cat "$D/SLOW.pid")"
}

@test "serve: a full engine queue (MFC_MAX_WAITING) is a 429 too" {
    MFC_MAX_SEQS=1 MFC_MAX_WAITING=1 start_server QUEUE --model "$D/slow.gguf"
    local u="http://127.0.0.1:$PORT"
    # one running, then one waiting (started in turn: two at once could both
    # find the queue holding one and the second get the 429 itself)
    for i in 1 2; do
        curl -sN --max-time 20 -o /dev/null "$u/v1/completions" \
            -d '{"prompt":"hi","max_tokens":1900,"ignore_eos":true,"stream":true}' &
        echo $! >"$BATS_TEST_TMPDIR/q$i.pid"
        local want ok=0
        want=$([ "$i" = 1 ] && echo running || echo waiting)
        for _ in $(seq 1 1200); do
            run curl -s "$u/metrics"
            if echo "$output" | grep -q "^mfc:num_requests_$want{model_name=\"slow\"} 1"; then
                ok=1
                break
            fi
            sleep 0.05
        done
        [ "$ok" = 1 ]
    done
    run curl -s -D "$BATS_TEST_TMPDIR/h" -w '\n%{http_code}' "$u/v1/completions" -d '{"prompt":"x","max_tokens":1}'
    [ "${lines[-1]}" = 429 ]
    grep -qi '^retry-after: 1' "$BATS_TEST_TMPDIR/h"
    echo "${lines[0]}" | jq -e '.error.message | test("overloaded")'
    kill "$(cat "$D/QUEUE.pid")"
}

@test "serve: SIGTERM: /health answers 503 draining and new work 503 while the in-flight stream finishes, then exit 0" {
    # 300 tokens take 10-40 s under ASan on a loaded machine: past the default
    # 30 s drain timeout, which would cut the stream (curl: partial file)
    MFC_DRAIN_TIMEOUT=600 start_server DRAIN --model "$D/slow.gguf"
    local u="http://127.0.0.1:$PORT" pid
    pid=$(cat "$D/DRAIN.pid")
    curl -sN "$u/v1/completions" \
        -d '{"prompt":"hi","max_tokens":300,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}' \
        >"$BATS_TEST_TMPDIR/s2" &
    echo $! >"$BATS_TEST_TMPDIR/c2.pid"
    for _ in $(seq 1 600); do
        [ -s "$BATS_TEST_TMPDIR/s2" ] && break
        sleep 0.05
    done
    kill -TERM "$pid"
    # while the stream runs, /health says draining (a loaded machine may take
    # a moment to deliver the signal; the 300-token stream outlasts that) and
    # a new generation is refused with the documented JSON
    local draining=0 done_then=
    for _ in $(seq 1 200); do
        run curl -s --max-time 2 -w '\n%{http_code}' "$u/health"
        if [ "${lines[-1]}" = 503 ] && [ "$(jq -r .status <<<"${lines[0]}")" = draining ]; then
            done_then=$(grep -c '^data: \[DONE\]$' "$BATS_TEST_TMPDIR/s2" || true)
            draining=1
            break
        fi
        sleep 0.05
    done
    [ "$draining" = 1 ]
    [ "$done_then" = 0 ] # the stream was still running when it said so
    run curl -s -w '\n%{http_code}' "$u/v1/completions" -d '{"prompt":"x","max_tokens":1}'
    [ "${lines[-1]}" = 503 ]
    jq -e '.error.code == "service_unavailable"' <<<"${lines[0]}"
    wait "$(cat "$BATS_TEST_TMPDIR/c2.pid")"
    grep -q '^data: \[DONE\]$' "$BATS_TEST_TMPDIR/s2"
    grep '^data: {' "$BATS_TEST_TMPDIR/s2" | tail -1 | sed 's/^data: //' |
        jq -e '.usage.completion_tokens == 300'
    local st=0
    wait "$pid" || st=$?
    [ "$st" -eq 0 ]
    grep -q 'SIGTERM: draining 1 requests' "$D/DRAIN.log"
    grep -q 'stopped' "$D/DRAIN.log"
    # and once it has exited, nothing listens
    ! curl -s --max-time 2 -o /dev/null "$u/health"
}

@test "serve: an mfc-built image runs mfc-serve under podman and answers" {
    command -v podman || { echo "podman is not installed (script/bootstrap installs it)"; false; }
    local T="$BATS_TEST_TMPDIR" port
    mkdir -p "$T/ctx"
    cp "$D/toy.gguf" "$T/ctx/toy.gguf"
    printf 'FROM ./toy.gguf\nPARAMETER temperature 0\nPARAMETER stop "zz"\n' >"$T/ctx/Modelfile"
    MFC_HOME="$T/store" "$MFC" build -q -t mfc-test/served:1 --output "type=docker,dest=$T/d.tar" \
        "$T/ctx" >/dev/null
    P=(podman --root "$T/podman" --runroot "$T/podman-run" --storage-driver=vfs
       --runtime runc --cgroup-manager=cgroupfs --events-backend=none)
    timeout 120 "${P[@]}" load -i "$T/d.tar" >/dev/null
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    timeout 60 "${P[@]}" run -d --name served --network=host -e MFC_PORT="$port" \
        --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 docker.io/mfc-test/served:1
    local ok=0
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && { ok=1; break; }
        sleep 0.1
    done
    "${P[@]}" logs served
    [ "$ok" = 1 ]
    # the name the image records (its first tag), as mfc serve would serve it
    curl -s "http://127.0.0.1:$port/v1/models" | jq -e '.data[0].id == "mfc-test/served:1"'
    run curl -s "http://127.0.0.1:$port/api/show" -d '{"model":"mfc-test/served:1"}'
    echo "$output" | jq -e '.parameters | test("stop +\"zz\"")'
    run curl -s "http://127.0.0.1:$port/v1/chat/completions" \
        -d '{"model":"mfc-test/served:1","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"ignore_eos":true}'
    echo "$output" | jq -e '.usage.completion_tokens == 3'
    timeout 60 "${P[@]}" stop -t 10 served >/dev/null
    "${P[@]}" logs served 2>&1 | grep -q 'SIGTERM: draining'
    "${P[@]}" rm -f served >/dev/null 2>&1 || true
    "${P[@]}" rmi -a -f >/dev/null 2>&1 || true
}

@test "serve: the GGUF's chat template family renders chats (phi-3 vocabulary)" {
    require_shared
    "$MKMODEL" -o "$D/phi.gguf" --preset toy --type q8_0 \
        --vocab-from "$MFC_SHARED/data/vocab/ggml-vocab-phi-3.gguf" >/dev/null
    start_server PHI --model "$D/phi.gguf"
    grep -q 'chat template: phi3' "$D/PHI.log"
    local u="http://127.0.0.1:$PORT"
    run curl -s "$u/tokenize" -d '{"messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"}]}'
    local toks
    toks=$(echo "$output" | jq -c '.tokens')
    run curl -s "$u/detokenize" -d "{\"tokens\":$toks}"
    echo "$output" | jq -e '.prompt | test("^<s><\\|system\\|>.*sys<\\|end\\|>.*<\\|user\\|>.*hi<\\|end\\|>.*<\\|assistant\\|>"; "m")'
    run curl -s "$u/api/show" -d '{}'
    echo "$output" | jq -e '.template | test("<\\|assistant\\|>")'
    echo "$output" | jq -e '.parameters | test("stop +\"<\\|end\\|>\"")'
    run curl -s "$u/v1/chat/completions" -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"ignore_eos":true}'
    echo "$output" | jq -e '.usage.completion_tokens == 2 and .usage.prompt_tokens > 5'
    kill "$(cat "$D/PHI.pid")"
}

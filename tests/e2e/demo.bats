#!/usr/bin/env bats
# demo.bats: the demo model end to end. modelfiles/demo (a
# 3M-parameter llama trained by tests/tools/mkfixtures.py and its pirate LoRA,
# both as Hugging Face / PEFT directories) is built by `mfc build`, then
#   - `mfc run` answers the recorded questions as the base and as the adapter;
#   - the `--output type=docker` archive is loaded into podman and run (runc,
#     cgroupfs, host network); the official `openai` npm client asks the base
#     and the adapter by model name;
#   - the image is pushed with `mfc push` to a local docker-registry with auth,
#     pulled by `mfc pull` into an empty store and served by `mfc serve`;
# and every answer must equal what transformers produced for the same prompt
# when the models were trained (modelfiles/demo/expected.json,
# prompts[i].contexts.modelfile).
load ../cli/helpers
load ../cli/registry_helpers

EXPECTED="$MFC_SRCDIR/modelfiles/demo/expected.json"
ASK="$MFC_SRCDIR/tests/e2e/ask.mjs"
PW=s3cret-Pw-417

setup_file() {
    local F="$BATS_FILE_TMPDIR"
    MFC_HOME="$F/home" "$MFC" build -q -t demo --output "type=docker,dest=$F/demo.tar" \
        "$MFC_SRCDIR/modelfiles/demo" >"$F/build.out" 2>"$F/build.err"
}

setup() {
    T="$BATS_TEST_TMPDIR"
    F="$BATS_FILE_TMPDIR"
    export MFC_HOME="$F/home" HOME="$T"
    P=(podman --root "$T/podman" --runroot "$T/podman-run" --storage-driver=vfs
       --runtime runc --cgroup-manager=cgroupfs --events-backend=none)
}

teardown() {
    for f in "$T"/*.pid; do
        [ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null
    done
    if [ -d "$T/podman" ]; then
        "${P[@]}" rm -f -t 0 mfc-demo >/dev/null 2>&1
        "${P[@]}" rmi -a -f >/dev/null 2>&1
    fi
    true
}

# expected KEY I: the recorded answer (KEY base|adapter) to question I
expected() { jq -r ".prompts[$2].contexts.modelfile.$1.answer" "$EXPECTED"; }
question() { jq -r ".prompts[$1].question" "$EXPECTED"; }

# wait_health URL: polls URL/health for up to 30 s
wait_health() {
    for _ in $(seq 1 300); do
        curl -sf -m 1 "$1/health" >/dev/null && return 0
        sleep 0.1
    done
    return 1
}

@test "demo: mfc build makes one image with the pirate adapter" {
    cat "$F/build.out" "$F/build.err" # shown when the test fails
    [ -s "$F/demo.tar" ]
    run "$MFC" inspect demo
    [ "$status" -eq 0 ]
    echo "$output" | jq -e '[.adapters[].name] == ["pirate"] and .adapters[0].rank == 8'
    echo "$output" | jq -e '.config.config.Labels."dev.mfc.architecture" == "llama"'
}

@test "demo: mfc run answers as transformers did, base and --adapter pirate" {
    [ "$(jq '.prompts | length' "$EXPECTED")" -eq 3 ]
    for i in 0 1 2; do
        q=$(question $i)
        run "$MFC" run demo "$q" </dev/null
        echo "base $i: $output"
        [ "$status" -eq 0 ]
        [ "$(echo "$output" | grep -v '^mfc: warning')" = "$(expected base $i)" ]
        run "$MFC" run --adapter pirate demo "$q" </dev/null
        echo "pirate $i: $output"
        [ "$status" -eq 0 ]
        [ "$(echo "$output" | grep -v '^mfc: warning')" = "$(expected adapter $i)" ]
    done
    # the adapter visibly changes the answer
    [ "$(expected base 0)" != "$(expected adapter 0)" ]
}

@test "demo: the docker archive runs under podman; the openai client gets the recorded answers" {
    command -v podman || { echo "podman is not installed (script/bootstrap installs it)"; false; }
    timeout 120 "${P[@]}" load -i "$F/demo.tar"
    local port
    port=$(free_port)
    timeout 60 "${P[@]}" run -d --name mfc-demo --network=host -e MFC_PORT="$port" \
        --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 docker.io/library/demo:latest
    wait_health "http://127.0.0.1:$port" || { "${P[@]}" logs mfc-demo; false; }
    # the container serves the base under the image's model name
    model=$(curl -sf "http://127.0.0.1:$port/v1/models" | jq -r '.data[] | select(.parent == null) | .id')
    echo "base model: $model"
    [ -n "$model" ]
    run timeout 120 node "$ASK" --base "http://127.0.0.1:$port" --model "$model" --adapter pirate \
        --expected "$EXPECTED"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(echo "$output" | grep -c '^ok ')" -eq 7 ]
    timeout 60 "${P[@]}" stop -t 10 mfc-demo >/dev/null
}

@test "demo: mfc push to a registry with auth, mfc pull into an empty store, mfc serve: same answers" {
    export REGISTRY_AUTH_FILE="$T/auth.json" # mfc login's credentials (podman reads it too)
    start_registry
    echo "$PW" | "$MFC" login -u alice --password-stdin "$R"
    run "$MFC" push demo "$R/team/demo:v1"
    echo "$output"
    [ "$status" -eq 0 ]
    local d
    d=$("$MFC" inspect demo | jq -r .digest)
    export MFC_HOME="$T/empty"
    [ ! -e "$MFC_HOME" ]
    run "$MFC" pull "$R/team/demo:v1"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$("$MFC" inspect "$R/team/demo:v1" | jq -r .digest)" = "$d" ]
    local port
    port=$(free_port)
    "$MFC" serve -p "$port" "$R/team/demo:v1" 2>"$T/serve.log" &
    echo $! >"$T/serve.pid"
    wait_health "http://127.0.0.1:$port" || { cat "$T/serve.log"; false; }
    model=$(curl -sf "http://127.0.0.1:$port/v1/models" | jq -r '.data[] | select(.parent == null) | .id')
    echo "base model: $model"
    run timeout 120 node "$ASK" --base "http://127.0.0.1:$port" --model "$model" --adapter pirate \
        --expected "$EXPECTED"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(echo "$output" | grep -c '^ok ')" -eq 7 ]
    stop_registry
}

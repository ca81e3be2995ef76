#!/usr/bin/env bats
# readme.bats: README.md is true. It runs the commands README.md shows:
#   - the quick start ("## Two commands"): script/demo, end to end (install,
#     build, mfc build the demo, mfc run base and adapter). script/test is NOT
#     run: it runs make check, which runs this file (it would recurse); the
#     test only checks that it is the other command listed.
#   - "## A Modelfile": README's Modelfile, written to a build context, and
#     every `mfc ...` line under it, on stand-ins for its files made from the
#     demo model (the Q4_K_M base and the LoRA named in it, converted with
#     mfc convert), with a local docker-registry for `mfc push`.
# And every Modelfile under modelfiles/ passes `mfc check`;
# modelfiles/multi-adapter also builds and serves its adapters.
load ../cli/helpers
load ../cli/registry_helpers

README="$MFC_SRCDIR/README.md"
PW=s3cret-Pw-417

setup() {
    T="$BATS_TEST_TMPDIR"
    export MFC_HOME="$T/home" HOME="$T" REGISTRY_AUTH_FILE="$T/auth.json"
}

teardown() {
    for f in "$T"/*.pid; do
        [ -e "$f" ] && kill "$(cat "$f")" 2>/dev/null
    done
    true
}

# section TITLE: README's lines from "## TITLE" up to the next "## "
section() { awk -v t="## $1" '$0 == t {on = 1; next} on && /^## / {exit} on' "$README"; }

# wait_health URL: polls URL/health for up to 30 s
wait_health() {
    for _ in $(seq 1 300); do
        curl -sf -m 1 "$1/health" >/dev/null && return 0
        sleep 0.1
    done
    return 1
}

@test "readme: the quick start's commands are script/demo and script/test" {
    run bash -c "$(declare -f section); README='$README'; section 'Two commands' | sed -n 's/^    \([^ ]*\).*/\1/p'"
    echo "$output"
    [ "$output" = "script/demo"$'\n'"script/test" ]
    [ -x "$MFC_SRCDIR/script/demo" ] && [ -x "$MFC_SRCDIR/script/test" ]
}

@test "readme: script/demo installs (nothing missing here), builds, and prints the base and pirate answers" {
    # script/bootstrap skips apt-get when every package is installed and npm
    # when $MFC_NODE_MODULES has the peers; the build is this test's build
    # tree (already built: make only checks it), the store an empty one.
    # script/test is not run here: it would run this test again.
    unset MAKEFLAGS MFLAGS MAKELEVEL
    run env MFC_DEMO_BUILD="$MFC_BUILDDIR" timeout 900 "$MFC_SRCDIR/script/demo" </dev/null
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" != *"bootstrap: installing"* ]]
    local base pirate
    base=$(jq -r '.prompts[0].contexts.modelfile.base.answer' "$MFC_SRCDIR/modelfiles/demo/expected.json")
    pirate=$(jq -r '.prompts[1].contexts.modelfile.adapter.answer' "$MFC_SRCDIR/modelfiles/demo/expected.json")
    grep -qxF "$base" <<<"$output"
    grep -qxF "$pirate" <<<"$output"
    [ "$(grep -c '^(the answer transformers gave' <<<"$output")" -eq 2 ]
    "$MFC" images | grep -q '^demo '
}

@test "readme: the Modelfile section's Modelfile builds and every mfc command shown works" {
    local ctx="$T/ctx" line port
    mkdir -p "$ctx"
    # README's Modelfile, verbatim (the fenced block of the section)
    section 'A Modelfile' | awk '/^```/ {n++; next} n == 1' >"$ctx/Modelfile"
    grep -q '^FROM ./llama-3.2-1b-instruct.Q4_K_M.gguf$' "$ctx/Modelfile"
    # stand-ins for the files it names, made from the demo model. Q8_0, not
    # the Q4_K_M of the name: the demo's ffn rows (640) are not a multiple of
    # 256, so Q4_K_M would fall back to Q5_0 for them (as llama.cpp does),
    # a type mfc-serve does not run.
    "$MFC" convert "$MFC_SRCDIR/modelfiles/demo/base" --quantize Q8_0 \
        -o "$ctx/llama-3.2-1b-instruct.Q4_K_M.gguf"
    "$MFC" lora convert "$MFC_SRCDIR/modelfiles/demo/adapter" \
        --base "$ctx/llama-3.2-1b-instruct.Q4_K_M.gguf" -o "$ctx/sql-lora.gguf"
    cp "$ctx/llama-3.2-1b-instruct.Q4_K_M.gguf" "$ctx/model.gguf"
    start_registry
    echo "$PW" | "$MFC" login -u alice --password-stdin "$R"
    section 'A Modelfile' | sed -n 's/^    \(mfc .*\)$/\1/p' | sed 's/  *#.*$//' >"$T/commands"
    [ "$(wc -l <"$T/commands")" -ge 10 ]
    cd "$ctx"
    while IFS= read -r line; do
        echo "## $line"
        case "$line" in
        "mfc serve "*) # a server: on a free port, in the background, until /health answers
            port=$(free_port)
            line=$(sed "s/-p [0-9]*/-p $port/" <<<"$line")
            # exec: $! is mfc serve itself (which execs mfc-serve), not a
            # subshell whose kill would leave the server holding bats' output
            eval "exec $line" >"$T/serve.out" 2>"$T/serve.log" &
            echo $! >"$T/serve.pid"
            wait_health "http://127.0.0.1:$port" || { cat "$T/serve.log"; false; }
            curl -sf "http://127.0.0.1:$port/v1/models" | jq -e '[.data[].id] | index("sql") != null'
            kill "$(cat "$T/serve.pid")"
            rm "$T/serve.pid"
            ;;
        "mfc push "*) # README's registry address becomes the local docker-registry's
            eval "${line//127.0.0.1:5000/$R}" </dev/null
            ;;
        *)
            eval "$line" </dev/null
            ;;
        esac
    done <"$T/commands"
    # what the commands made
    [ -s img.tar ]
    "$MFC" inspect llama3-sql | jq -e '[.adapters[].name] == ["sql"] and .adapters[0].scale == 0.8'
    grep -q llama3-sql <(curl -sf -u "alice:$PW" "http://$R/v2/_catalog")
    stop_registry
}

@test "readme: mfc check passes on every Modelfile under modelfiles/" {
    local n=0 f
    while IFS= read -r f; do
        run "$MFC" check "$(dirname "$f")"
        echo "$f: $output"
        [ "$status" -eq 0 ]
        [[ "${lines[0]}" == *": ok, "*" 0 warnings" ]]
        n=$((n + 1))
    done < <(find "$MFC_SRCDIR/modelfiles" -name Modelfile | sort)
    echo "$n Modelfiles"
    [ "$n" -ge 4 ]
}

@test "readme: modelfiles/multi-adapter builds: one adapter merged, two served by name" {
    "$MFC" build -q -t multi -f "$MFC_SRCDIR/modelfiles/multi-adapter/Modelfile" \
        "$MFC_SRCDIR/modelfiles"
    run "$MFC" inspect multi
    [ "$status" -eq 0 ]
    echo "$output" | jq -e '[.adapters[] | select(.merged | not) | .name] == ["pirate", "pirate-mild"]'
    echo "$output" | jq -e '[.adapters[] | select(.merged)] | length == 1 and .[0].scale == 0.25'
    run "$MFC" run --adapter pirate-mild multi "What is 12 plus 7?" </dev/null
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"Arr, 12 plus 7 be 19, matey!"* ]]
    run "$MFC" run --adapter nosuch multi "What is 12 plus 7?" </dev/null
    [ "$status" -ne 0 ]
}

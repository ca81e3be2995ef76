#!/usr/bin/env bats
# draft.bats: speculative decoding from the Modelfile to the HTTP answer.
# `DRAFT ./d.gguf` builds the draft into the image as /models/draft.gguf (a
# layer of its own) after checking it against FROM: a draft whose tokenizer
# differs (the first difference named), that is no smaller than the model,
# or of an architecture mfc does not run is refused with the Modelfile line;
# PARAMETER draft_* out of range is refused by mfc check. `mfc inspect`
# shows the draft, `mfc serve IMAGE` runs it: /api/show says so, greedy
# answers equal those without speculation, /metrics counts the proposals,
# the access log has draft_tokens/accepted_tokens, and a request's
# "speculative": false (OpenAI) or options.speculative (Ollama) turns it off.
# mfc-serve without a DRAFT proposes by prompt lookup. Loopback only; the
# models come from mkmodel.
load helpers
load serve_helpers

setup_file() {
    D="$BATS_FILE_TMPDIR"
    serve_model "$D/toy.gguf"
    # the draft: the model's vocabulary, one layer, another seed
    "$MKMODEL" -o "$D/draft.gguf" --preset toy --layers 1 --seed 7 >/dev/null
    "$MKMODEL" -o "$D/big.gguf" --preset toy --layers 3 >/dev/null
    "$MKMODEL" -o "$D/wide.gguf" --preset toy --layers 1 --vocab 600 >/dev/null
    python3 "$MFC_SRCDIR/tests/tools/gguf_edit.py" "$D/draft.gguf" "$D/eos.gguf" \
        --set tokenizer.ggml.eos_token_id=u32:5 >/dev/null
    python3 "$MFC_SRCDIR/tests/tools/gguf_edit.py" "$D/draft.gguf" "$D/arch.gguf" \
        --set general.architecture=str:mamba >/dev/null
}

setup() {
    T="$BATS_TEST_TMPDIR"
    export MFC_HOME="$T/store"
    mkdir -p "$T/ctx"
    cp "$BATS_FILE_TMPDIR"/*.gguf "$T/ctx/"
}

teardown() {
    serve_stop || true
}

build() { # build DRAFT-FILE [extra Modelfile lines...]
    local draft=$1
    shift
    printf '%s\n' "FROM ./toy.gguf" "DRAFT ./$draft" "PARAMETER temperature 0" "$@" >"$T/ctx/Modelfile"
    MFC_SERVE="$MFC_SERVE_BIN" run "$MFC" build -q -t spec "$T/ctx"
}

@test "DRAFT: a layer of its own, in model.yaml and mfc inspect" {
    build draft.gguf "PARAMETER draft_max 6" "PARAMETER draft_p_min 0"
    echo "$output"
    [ "$status" -eq 0 ]
    run "$MFC" inspect spec
    [ "$status" -eq 0 ]
    jq -e '[.manifest.layers[].annotations."org.cncf.model.filepath"] | index("/models/draft.gguf") != null' <<<"$output"
    jq -e '.draft.path == "/models/draft.gguf" and .draft.architecture == "llama"
        and .draft.parameters < 1000000 and .draft.settings.draft_max == 6' <<<"$output"
    d=$(jq -r '.manifest.layers[] | select(.annotations."org.cncf.model.filepath" == "/models/draft.gguf") | .digest' <<<"$output")
    tar -xOf "$MFC_HOME/blobs/sha256/${d#sha256:}" models/draft.gguf | cmp - "$T/ctx/draft.gguf"
    c=$(jq -r '.manifest.layers[] | select(.annotations."org.cncf.model.filepath" == "/etc/mfc/model.yaml") | .digest' <<<"$output")
    tar -xzOf "$MFC_HOME/blobs/sha256/${c#sha256:}" etc/mfc/model.yaml | grep -A1 '^draft:' | grep -q 'path: "/models/draft.gguf"'
}

@test "DRAFT is refused when its tokenizer, size or architecture does not fit" {
    build wide.gguf
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"Modelfile:2: DRAFT ./wide.gguf"*"tokenizer is not the model's"*"512 and 600 tokens"* ]]
    build eos.gguf
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"the EOS token is 2 against 5"* ]]
    build big.gguf
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"a draft must be smaller than its model"* ]]
    build arch.gguf
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"Modelfile:2: DRAFT ./arch.gguf"*"architecture 'mamba' is not supported"* ]]
    # nothing was tagged
    run "$MFC" images
    [[ "$output" != *spec* ]]
}

@test "PARAMETER draft_max and friends: typed and ranged" {
    printf '%s\n' "FROM ./toy.gguf" "PARAMETER draft_max 33" >"$T/ctx/Modelfile"
    run "$MFC" check "$T/ctx/Modelfile"
    [ "$status" -eq 1 ]
    [[ "$output" == *"draft_max 33 is out of range"*"1 to 32"* ]]
    printf '%s\n' "FROM ./toy.gguf" "PARAMETER draft_p_min 1.5" >"$T/ctx/Modelfile"
    run "$MFC" check "$T/ctx/Modelfile"
    [ "$status" -eq 1 ]
    printf '%s\n' "FROM ./toy.gguf" "PARAMETER speculative maybe" >"$T/ctx/Modelfile"
    run "$MFC" check "$T/ctx/Modelfile"
    [ "$status" -eq 1 ]
    printf '%s\n' "FROM ./toy.gguf" "PARAMETER speculative false" "PARAMETER draft_min 0" \
        "PARAMETER lookup_ngram 4" "PARAMETER lookup_ngram_min 1" >"$T/ctx/Modelfile"
    run "$MFC" check "$T/ctx/Modelfile"
    [ "$status" -eq 0 ]
}

ask() { # ask JSON-EXTRA: a greedy completion's text
    curl -sf "http://127.0.0.1:$port/v1/completions" \
        -d "{\"prompt\":\"one two one two one two\",\"max_tokens\":24,\"temperature\":0$1}" |
        jq -r '.choices[0].text'
}

@test "mfc serve IMAGE: the draft runs, answers equal those without it, counted in /metrics and the log" {
    build draft.gguf "PARAMETER draft_p_min 0"
    [ "$status" -eq 0 ]
    port=$(free_port)
    "$MFC" serve spec -p "$port" --host 127.0.0.1 </dev/null >"$T/serve.log" 2>&1 &
    SERVE_PID=$!
    for i in $(seq 1 300); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/health" && break
        kill -0 $SERVE_PID || { cat "$T/serve.log"; false; }
        sleep 0.1
    done
    run curl -sf "http://127.0.0.1:$port/api/show" -d '{"model":"spec"}'
    jq -e '.speculative.source == "draft" and .speculative.draft.layers == 1' <<<"$output"
    with=$(ask "")
    without=$(ask ',"speculative":false')
    [ -n "$with" ] && [ "$with" = "$without" ]
    run curl -sf "http://127.0.0.1:$port/api/generate" \
        -d '{"model":"spec","prompt":"one two one two","stream":false,"options":{"speculative":false,"num_predict":8}}'
    [ "$status" -eq 0 ]
    run curl -sf "http://127.0.0.1:$port/metrics"
    echo "$output" | grep spec_decode
    n=$(grep '^mfc:spec_decode_num_draft_tokens_total' <<<"$output" | awk '{print $2}')
    [ "$n" -gt 0 ]
    grep -q 'draft_tokens=[1-9][0-9]* accepted_tokens=' "$T/serve.log"
    # the requests with "speculative": false logged none
    [ "$(grep -c 'path=/v1/completions.*draft_tokens' "$T/serve.log")" -eq 1 ]
    run curl -s "http://127.0.0.1:$port/v1/completions" -d '{"prompt":"x","speculative":"yes"}'
    [[ "$output" == *"'speculative' must be true or false"* ]]
}

@test "mfc-serve without a DRAFT: prompt lookup; speculative false in model.yaml: none" {
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy
    run curl -sf "$SERVE_URL/api/show" -d '{"model":"toy"}'
    jq -e '.speculative.source == "lookup" and .speculative.lookup_ngram == 3' <<<"$output"
    serve_stop
    printf '%s\n' 'schema: "mfc.config/v1"' 'model:' '  path: "../toy.gguf"' 'params:' \
        '  speculative: false' >"$T/model.yaml"
    mkdir -p "$T/etc" && mv "$T/model.yaml" "$T/etc/" && cp "$BATS_FILE_TMPDIR/toy.gguf" "$T/"
    serve_start "$T" toy.gguf --config "$T/etc/model.yaml"
    run curl -sf "$SERVE_URL/api/show" -d '{}'
    jq -e '.speculative.source == "off"' <<<"$output"
    run curl -sf "$SERVE_URL/metrics"
    [[ "$output" != *spec_decode* ]]
}

@test "mfc-serve --draft with another vocabulary: refused at load, the difference named" {
    run "$MFC_SERVE_BIN" --model "$BATS_FILE_TMPDIR/toy.gguf" --draft "$BATS_FILE_TMPDIR/eos.gguf" --port 0
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"draft"*"eos.gguf"*"the EOS token is 2 against 5"* ]]
}

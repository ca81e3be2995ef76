#!/usr/bin/env bats
# first-use.bats: what a new user coming from Ollama and Docker trips over,
# caught where it is cheap: mfc check refuses a PARAMETER mfc-serve would
# refuse (one table, common/params.c) and a TEMPLATE mfc-serve cannot parse
# (its own parser), at Modelfile:LINE:COL; num_ctx above the model's context
# warns at build and at serve; CRLF Modelfiles give values without '\r' and
# mfc fmt -w writes LF; hf.co's mixed-case names are not refused; errors about
# an image's model.yaml name it, not a memfd; the OpenAI and Ollama routes
# refuse the same values with the same sentence, and a JSON syntax error
# names no param.
load helpers
load serve_helpers

MKIMAGE="$MFC_BUILDDIR/tests/tools/mkimage"

setup_file() {
    serve_model "$BATS_FILE_TMPDIR/toy.gguf" --ctx 256
}

setup() {
    T="$BATS_TEST_TMPDIR"
    export MFC_HOME="$T/store" MFC_SERVE=
    mkdir -p "$T/ctx"
    cp "$BATS_FILE_TMPDIR/toy.gguf" "$T/ctx/base.gguf"
}

teardown() { serve_stop || true; }

@test "mfc check refuses PARAMETER values mfc-serve refuses, at the value" {
    printf 'FROM ./base.gguf\nPARAMETER top_p 1.5\nPARAMETER temperature 200\nPARAMETER top_k 40\n' \
        >"$T/ctx/Modelfile"
    run "$MFC" check "$T/ctx/Modelfile"
    [ "$status" -eq 1 ]
    [[ "$output" == *"Modelfile:2:17: error: top_p 1.5 is out of range"* ]]
    [[ "$output" == *"hint: mfc-serve accepts top_p from 0 to 1"* ]]
    [[ "$output" == *"Modelfile:3:23: error: temperature 200 is out of range"* ]]
    [[ "$output" == *"2 errors"* ]]
    run "$MFC" build "$T/ctx"
    [ "$status" -eq 1 ]
    [ ! -e "$MFC_HOME/index.json" ] || [ "$(jq '.manifests | length' "$MFC_HOME/index.json")" = 0 ]
    printf 'FROM ./base.gguf\nPARAMETER top_p 1\nPARAMETER temperature 2\nPARAMETER seed -1\n' \
        >"$T/ctx/Modelfile"
    run "$MFC" check "$T/ctx/Modelfile"
    [ "$status" -eq 0 ]
}

@test "a TEMPLATE mfc-serve cannot parse fails mfc check and mfc build at Modelfile:LINE:COL" {
    printf '%s\n' 'FROM ./base.gguf' 'TEMPLATE """{{ if .System }}{{ .System }}{{ end }}' \
        '{{ .Content | upper }}"""' >"$T/ctx/Modelfile"
    run "$MFC" check "$T/ctx/Modelfile"
    [ "$status" -eq 1 ]
    [[ "$output" == *'Modelfile:3:15: error: TEMPLATE: function "upper" not defined'* ]]
    printf '%s\n' 'FROM ./base.gguf' 'TEMPLATE "{{ .Prompt }"' >"$T/ctx/Modelfile"
    run "$MFC" build "$T/ctx"
    [ "$status" -eq 1 ]
    [[ "$output" == *"Modelfile:2:"*"error: TEMPLATE: "* ]]
    printf '%s\n' 'FROM ./base.gguf' 'TEMPLATE "{{ .System }} {{ .Prompt }}"' >"$T/ctx/Modelfile"
    run "$MFC" check "$T/ctx/Modelfile"
    [ "$status" -eq 0 ]
}

@test "num_ctx larger than the model's context: a warning at build and at serve" {
    printf 'FROM ./base.gguf\nPARAMETER num_ctx 100000\n' >"$T/ctx/Modelfile"
    run "$MFC" build --progress plain -t big-ctx "$T/ctx"
    [ "$status" -eq 0 ]
    [[ "$output" == *"warning: PARAMETER num_ctx 100000 is larger than the model's context length 256 (llama.context_length); mfc-serve will use 256"* ]]
    printf 'params:\n  num_ctx: 100000\n' >"$T/m.yaml"
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --config "$T/m.yaml"
    grep -q "num_ctx 100000 is larger than the model's context length 256; using 256" "$SERVE_LOG"
}

@test "a CRLF Modelfile: no value keeps a '\\r'; mfc fmt -w writes LF" {
    printf 'FROM ./base.gguf\r\nSYSTEM """one\r\ntwo"""\r\nPARAMETER stop "<|eot|>"\r\n' >"$T/ctx/Modelfile"
    run "$MFC" check --json "$T/ctx/Modelfile"
    [ "$status" -eq 0 ]
    [ "$(jq -r '.instructions[1].value' <<<"$output")" = $'one\ntwo' ]
    [ "$(jq -r '.instructions[2].value' <<<"$output")" = '<|eot|>' ]
    "$MFC" fmt -w "$T/ctx/Modelfile"
    ! grep -q $'\r' "$T/ctx/Modelfile"
    run "$MFC" check "$T/ctx/Modelfile"
    [ "$status" -eq 0 ]
}

@test "FROM hf.co/Owner/Repo-GGUF:Q4_K_M in mixed case is taken as Ollama takes it" {
    printf 'FROM hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M\n' >"$T/ctx/Modelfile"
    run "$MFC" check "$T/ctx/Modelfile"
    [ "$status" -eq 0 ]
    # no network here: the build gets as far as asking hf.co, lowercased
    run "$MFC" build "$T/ctx"
    [ "$status" -eq 1 ]
    [[ "$output" != *"bad repository name"* ]]
    [[ "$output" == *"registry hf.co"* ]]
}

@test "an image's model.yaml that mfc-serve refuses is named as the image's file, not a memfd" {
    printf 'schema: mfc.config/v1\nmodel:\n  path: /models/model.gguf\nparams:\n  temperature: 7\n' >"$T/m.yaml"
    cp "$T/ctx/base.gguf" "$T/model.gguf"
    "$MKIMAGE" bad:1 --runtime /bin/echo --weights "$T/model.gguf" --config "$(cat "$T/m.yaml")" >/dev/null
    MFC_SERVE="$MFC_BUILDDIR/mfc-serve" run "$MFC" run bad:1 hi
    [ "$status" -eq 1 ]
    [[ "$output" == *"bad:1:/etc/mfc/model.yaml: 'params.temperature' is 7; allowed 0 to 2"* ]]
    [[ "$output" != *"/proc/self/fd"* ]]
}

@test "the OpenAI and Ollama routes refuse the same values with the same sentence" {
    serve_start "$BATS_FILE_TMPDIR" toy.gguf
    post() { curl -s "$SERVE_URL$1" -d "$2"; }
    for t in -1 5; do
        o=$(post /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"temperature\":$t}")
        l=$(post /api/chat "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"options\":{\"temperature\":$t}}")
        [ "$(jq -r .error.message <<<"$o")" = "'temperature' is $t; allowed 0 to 2" ]
        [ "$(jq -r .error.param <<<"$o")" = temperature ]
        [ "$(jq -r .error <<<"$l")" = "'options.temperature' is $t; allowed 0 to 2" ]
    done
    # max_tokens and num_predict above the context: both stop at the context
    o=$(post /v1/completions '{"prompt":"hi","max_tokens":100000,"temperature":0}')
    l=$(post /api/generate '{"prompt":"hi","stream":false,"options":{"num_predict":100000,"temperature":0}}')
    [ "$(jq -r .choices[0].finish_reason <<<"$o")" != null ]
    [ "$(jq -r .done <<<"$l")" = true ]
    # a JSON syntax error names no param
    o=$(post /v1/chat/completions '{"messages": [')
    [ "$(jq -r .error.type <<<"$o")" = invalid_request_error ]
    [ "$(jq .error.param <<<"$o")" = null ]
}

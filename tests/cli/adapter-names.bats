#!/usr/bin/env bats
# adapter-names.bats: an ADAPTER without --name is named after its source's
# file name (compiler/plan_config.c, docs/image.md): `ADAPTER ./sql-lora.gguf`
# is the adapter "sql-lora" in the image's model.yaml, its layer path, the
# dev.mfc.adapters label, `mfc inspect`, and the model a real mfc-serve lists
# in /v1/models and selects by a request's `model`; a second sql-lora.gguf is
# "sql-lora-2". Loopback only; the model and adapters come from mkmodel.
load helpers
load serve_helpers

setup_file() {
    D="$BATS_FILE_TMPDIR"
    serve_model "$D/toy.gguf"
    "$MKMODEL" -o "$D/a.gguf" --preset toy --lora 8 --targets q,k,v,o,gate,up,down \
        --lora-alpha 64 --seed 7 >/dev/null
    "$MKMODEL" -o "$D/b.gguf" --preset toy --lora 8 --targets q,k,v,o,gate,up,down \
        --lora-alpha 64 --seed 9 >/dev/null
}

setup() {
    T="$BATS_TEST_TMPDIR"
    export MFC_HOME="$T/store"
    mkdir -p "$T/ctx/more"
    cp "$BATS_FILE_TMPDIR/toy.gguf" "$T/ctx/"
    cp "$BATS_FILE_TMPDIR/a.gguf" "$T/ctx/sql-lora.gguf"
    cp "$BATS_FILE_TMPDIR/b.gguf" "$T/ctx/more/sql-lora.gguf"
    cp "$BATS_FILE_TMPDIR/b.gguf" "$T/ctx/chat.gguf"
    printf '%s\n' "FROM ./toy.gguf" "ADAPTER ./sql-lora.gguf" "ADAPTER --scale=0.5 ./more/sql-lora.gguf" \
        "ADAPTER --name=chat ./chat.gguf" "PARAMETER temperature 0" "PARAMETER num_predict 6" \
        >"$T/ctx/Modelfile"
}

teardown() {
    serve_stop || true
}

@test "ADAPTER ./sql-lora.gguf: named sql-lora in model.yaml, the layer path, the label and mfc inspect" {
    MFC_SERVE="$MFC_SERVE_BIN" run "$MFC" build -q -t named "$T/ctx"
    [ "$status" -eq 0 ]
    run "$MFC" inspect named
    [ "$status" -eq 0 ]
    jq -e '.config.config.Labels."dev.mfc.adapters" == "sql-lora,sql-lora-2,chat"' <<<"$output"
    jq -e '[.manifest.layers[].annotations."org.cncf.model.filepath" | select(. != null and startswith("/adapters/"))]
        == ["/adapters/sql-lora.gguf", "/adapters/sql-lora-2.gguf", "/adapters/chat.gguf"]' <<<"$output"
    jq -e '[.adapters[] | [.name, .scale]] == [["sql-lora", 1], ["sql-lora-2", 0.5], ["chat", 1]]' <<<"$output"
    # model.yaml, read from the config layer, says the same
    d=$(jq -r '.manifest.layers[] | select(.annotations."org.cncf.model.filepath" == "/etc/mfc/model.yaml") | .digest' <<<"$output")
    tar -xzOf "$MFC_HOME/blobs/sha256/${d#sha256:}" etc/mfc/model.yaml >"$T/model.yaml"
    grep -A2 -- '- name:' "$T/model.yaml"
    [ "$(grep -c -- '- name: "sql-lora"$' "$T/model.yaml")" -eq 1 ]
    [ "$(grep -c '  path: "/adapters/sql-lora-2.gguf"$' "$T/model.yaml")" -eq 1 ]
    # the bytes under /adapters/sql-lora.gguf are the first file, not the second
    a=$(jq -r '.manifest.layers[] | select(.annotations."org.cncf.model.filepath" == "/adapters/sql-lora.gguf") | .digest' <<<"$output")
    tar -xOf "$MFC_HOME/blobs/sha256/${a#sha256:}" adapters/sql-lora.gguf | cmp - "$T/ctx/sql-lora.gguf"
}

@test "mfc serve IMAGE: /v1/models lists sql-lora, and model sql-lora selects that adapter" {
    "$MFC" build -q -t named "$T/ctx" >/dev/null
    port=$(free_port)
    "$MFC" serve named -p "$port" --host 127.0.0.1 </dev/null >"$T/serve.log" 2>&1 &
    SERVE_PID=$!
    for i in $(seq 1 300); do
        curl -sf -o /dev/null "http://127.0.0.1:$port/health" && break
        kill -0 $SERVE_PID || { cat "$T/serve.log"; false; }
        sleep 0.1
    done
    run curl -sf "http://127.0.0.1:$port/v1/models"
    [ "$status" -eq 0 ]
    echo "$output"
    jq -e '[.data[].id] | index("sql-lora") != null and index("sql-lora-2") != null
        and index("chat") != null and index("0") == null' <<<"$output"
    ask() {
        curl -s -w ' %{http_code}' "http://127.0.0.1:$port/v1/chat/completions" \
            -d "{\"model\":\"$1\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello there\"}]}"
    }
    base=$(ask named)
    sql=$(ask sql-lora)
    sql2=$(ask sql-lora-2)
    echo "base: $base"; echo "sql-lora: $sql"; echo "sql-lora-2: $sql2"
    [[ "$base" == *" 200" && "$sql" == *" 200" && "$sql2" == *" 200" ]]
    c() { jq -r '.choices[0].message.content' <<<"${1% *}"; }
    [ "$(c "$sql")" != "$(c "$base")" ] # the adapter is applied
    [ "$(c "$sql")" != "$(c "$sql2")" ] # and it is this one, not the other sql-lora.gguf
    [[ "$(ask 0)" == *" 404" ]]         # the index is no name any more
}

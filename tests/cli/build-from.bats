#!/usr/bin/env bats
# build-from.bats: FROM and ADAPTER by name (fetch/source_ref.c): a local
# mfc image (its weight layer reused as is, its SYSTEM/TEMPLATE/PARAMETERs
# inherited as defaults), and registry references against the Debian
# docker-registry on 127.0.0.1 with htpasswd auth: an mfc image pushed with
# `mfc push`, a ModelPack artifact and an Ollama-style manifest pushed with
# curl; a tampered blob and unknown names give clear errors and store nothing.
load helpers
load registry_helpers

setup_file() {
    export DATA="$BATS_FILE_TMPDIR/data"
    mkdir -p "$DATA"
    MKMODEL="$MFC_BUILDDIR/tests/tools/mkmodel"
    "$MKMODEL" -o "$DATA/base.gguf" --preset toy --seed 1 >/dev/null
    "$MKMODEL" -o "$DATA/lora.gguf" --preset toy --lora 4 --targets q,v >/dev/null
    "$MKMODEL" -o "$DATA/lora2.gguf" --preset toy --lora 2 --targets q --seed 3 >/dev/null
    "$MKMODEL" -o "$DATA/other.gguf" --preset toy --seed 2 >/dev/null
}

setup() {
    T="$BATS_TEST_TMPDIR"
    export MFC_HOME="$T/store" MFC_SERVE=/bin/echo REGISTRY_AUTH_FILE="$T/auth.json" HOME="$T"
    mkdir -p "$T/base" "$T/d"
    cp "$DATA"/*.gguf "$T/base/"
    printf '%s\n' "FROM ./base.gguf" "PARAMETER temperature 0.5" "PARAMETER num_ctx 256" \
        "SYSTEM be brief" 'TEMPLATE "{{ .Prompt }}"' >"$T/base/Modelfile"
}

teardown() { stop_registry; }

layer_at() {
    "$MFC" inspect "$1" | jq -r --arg p "$2" \
        '.manifest.layers[] | select(.annotations."org.cncf.model.filepath" == $p) | .digest'
}
# The image's model.yaml as JSON.
config_of() {
    local d
    d=$(layer_at "$1" /etc/mfc/model.yaml)
    tar xzOf "$MFC_HOME/blobs/sha256/${d#sha256:}" etc/mfc/model.yaml |
        python3 -c 'import sys,yaml,json; print(json.dumps(yaml.safe_load(sys.stdin)))'
}
tags() { jq -cS '[.manifests[] | .annotations."org.opencontainers.image.ref.name"]' "$MFC_HOME/index.json"; }

@test "FROM a local image reuses its weight layer and inherits its defaults" {
    "$MFC" build -q -t llama-base "$T/base" >/dev/null
    printf '%s\n' "FROM llama-base" "PARAMETER temperature 0.9" >"$T/d/Modelfile"
    run "$MFC" build -t derived "$T/d"
    [ "$status" -eq 0 ]
    w=$(layer_at llama-base /models/model.gguf)
    [ -n "$w" ] && [ "$(layer_at derived /models/model.gguf)" = "$w" ]
    config_of derived >"$T/c.json"
    [ "$(jq -r .system "$T/c.json")" = "be brief" ]
    [ "$(jq -r .template "$T/c.json")" = "{{ .Prompt }}" ]
    [ "$(jq -c .params "$T/c.json")" = '{"temperature":0.9,"num_ctx":256}' ]
    # an unchanged rebuild is all CACHED
    run "$MFC" build --progress plain -t derived "$T/d"
    [ "$status" -eq 0 ] && ! grep -q ' DONE in ' <<<"$output"
    # the Modelfile's SYSTEM wins; FROM by manifest digest works too
    m=$("$MFC" inspect llama-base | jq -r .digest)
    printf '%s\n' "FROM $m" "SYSTEM be verbose" >"$T/d/Modelfile"
    "$MFC" build -q -t derived2 "$T/d" >/dev/null
    [ "$(layer_at derived2 /models/model.gguf)" = "$w" ]
    [ "$(config_of derived2 | jq -r .system)" = "be verbose" ]
    # a new SYSTEM in the base reaches a rebuild of the derived image
    sed -i 's/be brief/be kind/' "$T/base/Modelfile"
    "$MFC" build -q -t llama-base "$T/base" >/dev/null
    printf '%s\n' "FROM llama-base" >"$T/d/Modelfile"
    "$MFC" build -q -t derived3 "$T/d" >/dev/null
    [ "$(config_of derived3 | jq -r .system)" = "be kind" ]
}

@test "FROM a local image inherits its LICENSE too, and says which adapters it does not inherit" {
    printf '%s\n' "ADAPTER --name=sql ./lora.gguf" "ADAPTER ./lora2.gguf" 'LICENSE """MIT"""' \
        >>"$T/base/Modelfile"
    "$MFC" build -q -t with-ad "$T/base" >/dev/null
    printf '%s\n' "FROM with-ad" "SYSTEM new" >"$T/d/Modelfile"
    run "$MFC" build --progress plain -t child "$T/d"
    [ "$status" -eq 0 ]
    [[ "$output" == *"warning: FROM with-ad: the base image's 2 adapter(s) (sql, lora2) are not inherited; add an ADAPTER line for each one to keep it"* ]]
    config_of child >"$T/c.json"
    [ "$(jq -c .license "$T/c.json")" = '["MIT"]' ]
    [ "$(jq -r .system "$T/c.json")" = new ]
    [ "$(jq -r .template "$T/c.json")" = "{{ .Prompt }}" ]
    [ "$(jq -c .params "$T/c.json")" = '{"temperature":0.5,"num_ctx":256}' ]
    [ "$(jq -c '.adapters // []' "$T/c.json")" = '[]' ]
}

@test "ADAPTER by image name: the single adapter layer, or an error naming the ambiguity" {
    printf '%s\n' "FROM ./base.gguf" "ADAPTER --name=sql ./lora.gguf" >"$T/base/Modelfile"
    "$MFC" build -q -t with-lora "$T/base" >/dev/null
    printf '%s\n' "FROM ./base.gguf" "ADAPTER --name=sql ./lora.gguf" "ADAPTER ./lora2.gguf" >"$T/base/Modelfile"
    "$MFC" build -q -t two-loras "$T/base" >/dev/null
    cp "$DATA/base.gguf" "$T/d/"
    printf '%s\n' "FROM ./base.gguf" "ADAPTER with-lora" >"$T/d/Modelfile"
    run "$MFC" build -q -t a1 "$T/d"
    [ "$status" -eq 0 ]
    # the adapter's bytes are lora.gguf's
    a=$(layer_at a1 /adapters/with-lora.gguf)
    [ -n "$a" ]
    tar xOf "$MFC_HOME/blobs/sha256/${a#sha256:}" | cmp - "$DATA/lora.gguf"
    printf '%s\n' "FROM ./base.gguf" "ADAPTER two-loras" >"$T/d/Modelfile"
    run "$MFC" build -q -t a2 "$T/d"
    [ "$status" -ne 0 ]
    [[ "$output" == *"Modelfile:2"* && "$output" == *"ambiguous"* ]]
}

@test "FROM an mfc image in a registry (mfc push) into an empty store shares the weight layer" {
    start_registry
    echo "$PW" | "$MFC" login -u alice --password-stdin "$R" >/dev/null
    "$MFC" build -q -t llama-base "$T/base" >/dev/null
    w=$(layer_at llama-base /models/model.gguf)
    "$MFC" push llama-base "$R/team/llama:1" >/dev/null 2>&1
    export MFC_HOME="$T/store2"
    printf '%s\n' "FROM $R/team/llama:1" >"$T/d/Modelfile"
    run "$MFC" build -t derived "$T/d"
    [ "$status" -eq 0 ]
    [ "$(layer_at derived /models/model.gguf)" = "$w" ]
    [ "$(config_of derived | jq -r .system)" = "be brief" ]
    # a pin by manifest digest
    m=$(skopeo inspect --raw --tls-verify=false --creds "alice:$PW" "docker://$R/team/llama:1" | sha256sum | cut -d' ' -f1)
    printf '%s\n' "FROM $R/team/llama@sha256:$m" >"$T/d/Modelfile"
    run "$MFC" build -q -t pinned "$T/d"
    [ "$status" -eq 0 ]
    [ "$(layer_at pinned /models/model.gguf)" = "$w" ]
}

# A ModelPack artifact: config + a raw weight layer with a .gguf filepath.
push_modelpack() {
    echo '{"descriptor":{"name":"toy"},"config":{"format":"gguf"},"modelfs":{"type":"layers","diffIds":[]}}' >"$T/mp-config.json"
    c=$(push_blob team/mp "$T/mp-config.json")
    g=$(push_blob team/mp "$DATA/base.gguf")
    cat >"$T/mp.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json",
 "artifactType":"application/vnd.cncf.model.manifest.v1+json",
 "config":{"mediaType":"application/vnd.cncf.model.config.v1+json","digest":"$c","size":$(stat -c %s "$T/mp-config.json")},
 "layers":[{"mediaType":"application/vnd.cncf.model.weight.v1.raw","digest":"$g","size":$(stat -c %s "$DATA/base.gguf"),
   "annotations":{"org.cncf.model.filepath":"toy-q8.gguf"}}]}
JSON
    push_manifest team/mp 1 "$T/mp.json" application/vnd.oci.image.manifest.v1+json
}

@test "FROM a ModelPack artifact and an Ollama manifest in a registry" {
    start_registry
    echo "$PW" | "$MFC" login -u alice --password-stdin "$R" >/dev/null
    push_modelpack
    printf '%s\n' "FROM $R/team/mp:1" "SYSTEM hi" >"$T/d/Modelfile"
    run "$MFC" build -q -t from-mp "$T/d"
    [ "$status" -eq 0 ]
    w=$(layer_at from-mp /models/model.gguf)
    tar xOf "$MFC_HOME/blobs/sha256/${w#sha256:}" | cmp - "$DATA/base.gguf"
    # Ollama: model + template/system/params layers become defaults
    printf '{{ .System }} {{ .Prompt }}' >"$T/tmpl" && printf 'you are a toy' >"$T/sys"
    printf '{"temperature":0.25,"stop":["<end>"]}' >"$T/params"
    echo '{"model_format":"gguf"}' >"$T/oc.json"
    c=$(push_blob library/toy "$T/oc.json"); g=$(push_blob library/toy "$DATA/base.gguf")
    t=$(push_blob library/toy "$T/tmpl"); s=$(push_blob library/toy "$T/sys"); p=$(push_blob library/toy "$T/params")
    L() { echo "{\"mediaType\":\"application/vnd.ollama.image.$1\",\"digest\":\"$2\",\"size\":$(stat -c %s "$3")}"; }
    cat >"$T/ol.json" <<JSON
{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",
 "config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"$c","size":$(stat -c %s "$T/oc.json")},
 "layers":[$(L model "$g" "$DATA/base.gguf"),$(L template "$t" "$T/tmpl"),$(L system "$s" "$T/sys"),$(L params "$p" "$T/params")]}
JSON
    push_manifest library/toy 1b "$T/ol.json" application/vnd.docker.distribution.manifest.v2+json
    printf '%s\n' "FROM $R/library/toy:1b" "PARAMETER num_ctx 128" >"$T/d/Modelfile"
    run "$MFC" build -q -t from-ollama "$T/d"
    [ "$status" -eq 0 ]
    config_of from-ollama >"$T/c.json"
    [ "$(jq -r .system "$T/c.json")" = "you are a toy" ]
    [ "$(jq -r .template "$T/c.json")" = "{{ .System }} {{ .Prompt }}" ]
    [ "$(jq -c .params "$T/c.json")" = '{"num_ctx":128,"temperature":0.25,"stop":["<end>"]}' ]
}

@test "a tampered registry blob and unknown names: clear errors, nothing stored, no tag" {
    start_registry
    echo "$PW" | "$MFC" login -u alice --password-stdin "$R" >/dev/null
    push_modelpack
    f="$T/storage/docker/registry/v2/blobs/sha256/${g:7:2}/${g#sha256:}/data"
    printf 'XXXXXXXX' | dd of="$f" bs=1 seek=1000 conv=notrunc 2>/dev/null
    mkdir -p "$T/keep" && cp "$DATA/other.gguf" "$T/keep/" && echo "FROM ./other.gguf" >"$T/keep/Modelfile"
    "$MFC" build -q -t keep "$T/keep" >/dev/null # not sharing the tampered blob
    before=$(tags)
    printf '%s\n' "FROM $R/team/mp:1" >"$T/d/Modelfile"
    run "$MFC" build -q -t bad "$T/d"
    [ "$status" -ne 0 ]
    [[ "$output" == *"$g"* && "$output" == *"match"* ]]
    [ "$(tags)" = "$before" ]
    [ ! -e "$MFC_HOME/blobs/sha256/${g#sha256:}" ]
    # an unknown repository on the registry
    printf '%s\n' "FROM $R/team/nope:1" >"$T/d/Modelfile"
    run timeout 60 "$MFC" build -q -t bad "$T/d"
    [ "$status" -ne 0 ]
    [[ "$output" == *"'$R/team/nope:1' is not an image in the store ($MFC_HOME)"* ]]
    # a bare unknown name: the store, then the Ollama library (unreachable here)
    printf '%s\n' "FROM no-such-model-xyz" >"$T/d/Modelfile"
    run timeout 60 "$MFC" build -q -t bad "$T/d"
    [ "$status" -ne 0 ]
    [[ "$output" == *"not an image in the store"* ]]
    [[ "$output" == *"registry.ollama.ai/library/no-such-model-xyz"* ]]
    [ "$(tags)" = "$before" ]
}

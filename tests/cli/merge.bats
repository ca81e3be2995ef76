#!/usr/bin/env bats
# merge.bats: LoRA merging and quantize-on-build (docs/merge.md).
# `mfc lora merge`: the merged model's logits equal the base's with the
# same adapters applied at run time (runtime/model/lora.c through mfc-eval, an
# independent implementation), errors name the tensor and both shapes and
# leave no output. `mfc build`: a Modelfile with two named ADAPTERs and one
# --merge gives two adapter layers and weights byte-identical to `mfc lora
# merge`; --merge-adapters folds all in; --quantize Q8_0 gives a Q8_0 file
# that llama.cpp (node-llama-cpp) loads and agrees with; a quantized source
# is refused as `ollama create -q` refuses it. Models and adapters come from
# mkmodel; each test has its own store.

load helpers

BUILD="${MFC_BUILDDIR:-$BATS_TEST_DIRNAME/../..}"
MKMODEL="$BUILD/tests/tools/mkmodel"
EVAL="$BUILD/tests/tools/mfc-eval"
REF="$MFC_SRCDIR/tests/tools/llama-logits.mjs"
CMP="$MFC_SRCDIR/tests/cli/engine_numerics.py"
NODE_MODULES="${MFC_NODE_MODULES:-$MFC_SRCDIR/tests/tools/node/node_modules}"
TOKENS=1,17,200,33,4,250,61,7

setup_file() {
    export DATA="$BATS_FILE_TMPDIR/data"
    mkdir -p "$DATA"
    "$MKMODEL" -o "$DATA/base.gguf" --preset toy --type f32 --seed 1
    "$MKMODEL" -o "$DATA/base-f16.gguf" --preset toy --type f16 --seed 1
    "$MKMODEL" -o "$DATA/base-q8.gguf" --preset toy --type q8_0 --seed 1
    "$MKMODEL" -o "$DATA/a.gguf" --preset toy --lora 4 --targets q,v --lora-alpha 8 --seed 2
    "$MKMODEL" -o "$DATA/b.gguf" --preset toy --lora 2 --targets k,o --seed 3
    "$MKMODEL" -o "$DATA/c.gguf" --preset toy --lora 8 --targets gate,up,down --lora-alpha 4 --seed 4
    "$MKMODEL" -o "$DATA/wide.gguf" --preset toy --embd 512 --lora 4 --targets q --seed 5
}

setup() {
    T="$BATS_TEST_TMPDIR"
    export MFC_HOME="$T/store" MFC_SERVE=
    CTX="$T/ctx"
    mkdir -p "$CTX"
    cp "$DATA"/*.gguf "$CTX/"
}

# maxdiff A.json B.json: the largest |logit difference| of two mfc-eval runs.
maxdiff() {
    python3 -c 'import json,sys
a=json.load(open(sys.argv[1]))["logits"]; b=json.load(open(sys.argv[2]))["logits"]
print(max(abs(x-y) for x,y in zip(a,b)))' "$1" "$2"
}

# The GGUF an image holds at /PATH, extracted to FILE.
image_file() {
    local d
    d=$("$MFC" inspect "$1" | jq -r --arg p "$2" \
        '.manifest.layers[] | select(.annotations."org.cncf.model.filepath" == $p) | .digest')
    [ -n "$d" ] || return 1
    tar -xOf "$MFC_HOME/blobs/sha256/${d#sha256:}" "${2#/}" >"$3"
}

@test "lora merge: merged F32 model's logits equal base + the same adapters at run time" {
    run "$MFC" lora merge "$CTX/base.gguf" "$CTX/a.gguf:0.5" "$CTX/b.gguf" --scale -1.5 \
        "$CTX/c.gguf" -o "$T/m.gguf"
    [ "$status" -eq 0 ]
    [[ "$output" == *"merged (14 LoRA pairs from 3 adapters)"* ]] || {
        echo "$output"
        false
    }
    "$EVAL" --model "$T/m.gguf" --tokens $TOKENS --threads 1 >"$T/merged.json"
    "$EVAL" --model "$CTX/base.gguf" --lora "$CTX/a.gguf" --lora-scale 0.5 --lora "$CTX/b.gguf" \
        --lora-scale -1.5 --lora "$CTX/c.gguf" --tokens $TOKENS --threads 1 >"$T/runtime.json"
    "$EVAL" --model "$CTX/base.gguf" --tokens $TOKENS --threads 1 >"$T/base.json"
    d=$(maxdiff "$T/merged.json" "$T/runtime.json")
    effect=$(maxdiff "$T/base.json" "$T/runtime.json")
    echo "# merged vs runtime adapters: $d (adapters' effect $effect)" >&3
    python3 -c "import sys; sys.exit(not ($d < 1e-4 and $effect > 0.05))"
}

@test "lora merge: an F16 base stays F16 and matches the runtime within F16 rounding" {
    "$MFC" lora merge "$CTX/base-f16.gguf" "$CTX/a.gguf" -o "$T/m16.gguf"
    "$MFC" inspect "$T/m16.gguf" | grep -q 'file type.*F16'
    "$EVAL" --model "$T/m16.gguf" --tokens $TOKENS --threads 1 >"$T/merged.json"
    "$EVAL" --model "$CTX/base-f16.gguf" --lora "$CTX/a.gguf" --tokens $TOKENS \
        --threads 1 >"$T/runtime.json"
    "$EVAL" --model "$CTX/base-f16.gguf" --tokens $TOKENS --threads 1 >"$T/base.json"
    d=$(maxdiff "$T/merged.json" "$T/runtime.json")
    effect=$(maxdiff "$T/base.json" "$T/runtime.json")
    echo "# F16 merged vs runtime: $d (effect $effect)" >&3
    python3 -c "import sys; sys.exit(not ($d < 0.1 * $effect))"
}

@test "lora merge: a mismatched adapter names the tensor and both shapes, writes nothing" {
    run "$MFC" lora merge "$CTX/base.gguf" "$CTX/wide.gguf" -o "$T/bad.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"blk.0.attn_q.weight.lora_a"* ]]
    [[ "$output" == *"[512, 4]"* ]]
    [[ "$output" == *"[256, 256]"* ]]
    [ ! -e "$T/bad.gguf" ]
    [ -z "$(ls -A "$T" | grep -v -x -e ctx -e store)" ]
}

@test "lora merge: usage errors exit 2" {
    run "$MFC" lora merge "$CTX/base.gguf" "$CTX/a.gguf"
    [ "$status" -eq 2 ]
    [[ "$output" == *"-o OUT.gguf"* ]]
    run "$MFC" lora merge "$CTX/base.gguf" -o "$T/x.gguf"
    [ "$status" -eq 2 ]
    run "$MFC" lora merge --scale 2 "$CTX/base.gguf" "$CTX/a.gguf" -o "$T/x.gguf"
    [ "$status" -eq 2 ]
    run "$MFC" lora merge "$CTX/base.gguf" "$CTX/a.gguf" -o "$T/x.gguf" --quantize Q9
    [ "$status" -eq 2 ]
    [[ "$output" == *"Q4_K_M"* ]]
}

@test "build: two named ADAPTERs and one --merge: two adapter layers, merged weights" {
    printf '%s\n' "FROM ./base.gguf" "ADAPTER --name=sql ./a.gguf" \
        "ADAPTER --name=chat --scale=0.5 ./b.gguf" "ADAPTER --merge --scale=0.8 ./c.gguf" \
        >"$CTX/Modelfile"
    run "$MFC" build -q -t m1 "$CTX"
    [ "$status" -eq 0 ]
    layers=$("$MFC" inspect m1 | jq -r '[.manifest.layers[].annotations."org.cncf.model.filepath"] | join(" ")')
    [ "$layers" = "/models/model.gguf /adapters/sql.gguf /adapters/chat.gguf /etc/mfc/model.yaml" ]
    # the weights are exactly what mfc lora merge writes; the adapters are the files
    "$MFC" lora merge "$CTX/base.gguf" "$CTX/c.gguf:0.8" -o "$T/want.gguf"
    image_file m1 /models/model.gguf "$T/got.gguf"
    cmp "$T/want.gguf" "$T/got.gguf"
    image_file m1 /adapters/sql.gguf "$T/sql.gguf"
    cmp "$CTX/a.gguf" "$T/sql.gguf"
    "$MFC" inspect m1 | jq -e '.config.config.Labels."dev.mfc.adapters" == "sql,chat"'
    # mfc inspect lists all three, the merged one with its scale and rank
    run "$MFC" inspect m1
    echo "$output" | jq -e '[.adapters[] | [.name, .merged, .scale, .rank]] ==
        [["sql", false, 1, 4], ["chat", false, 0.5, 2], ["c", true, 0.8, 8]]'
    # unchanged: all cached; another scale reruns the merge only
    run "$MFC" build --progress plain -t m1 "$CTX"
    [ "$status" -eq 0 ]
    [[ "$output" == *"merge 1 adapter into the weights CACHED"* ]]
    sed -i 's/--scale=0.8/--scale=0.9/' "$CTX/Modelfile"
    run "$MFC" build --progress plain -t m2 "$CTX"
    [ "$status" -eq 0 ]
    [[ "$output" == *"merge 1 adapter into the weights DONE"* ]]
    image_file m2 /models/model.gguf "$T/got2.gguf"
    ! cmp -s "$T/got.gguf" "$T/got2.gguf"
}

@test "build --merge-adapters: every adapter in the weights, no adapter layer" {
    printf '%s\n' "FROM ./base.gguf" "ADAPTER --name=sql ./a.gguf" \
        "ADAPTER --scale=0.5 ./b.gguf" >"$CTX/Modelfile"
    run "$MFC" build -q -t m --merge-adapters "$CTX"
    [ "$status" -eq 0 ]
    layers=$("$MFC" inspect m | jq -r '[.manifest.layers[].annotations."org.cncf.model.filepath"] | join(" ")')
    [ "$layers" = "/models/model.gguf /etc/mfc/model.yaml" ]
    "$MFC" lora merge "$CTX/base.gguf" "$CTX/a.gguf" "$CTX/b.gguf:0.5" -o "$T/want.gguf"
    image_file m /models/model.gguf "$T/got.gguf"
    cmp "$T/want.gguf" "$T/got.gguf"
}

@test "build --quantize Q8_0: a Q8_0 model llama.cpp loads and agrees with" {
    printf '%s\n' "FROM ./base.gguf" >"$CTX/Modelfile"
    run "$MFC" build -q -t q --quantize q8_0 "$CTX"
    [ "$status" -eq 0 ]
    "$MFC" inspect q | jq -e '.config.config.Labels."dev.mfc.quantization" == "Q8_0"'
    image_file q /models/model.gguf "$T/q8.gguf"
    "$MFC" inspect "$T/q8.gguf" | grep -q 'tensor types *F32 5, Q8_0 16'
    command -v node >/dev/null || skip "node is not installed"
    [ -d "$NODE_MODULES/node-llama-cpp" ] || skip "node-llama-cpp is not installed at $NODE_MODULES"
    "$EVAL" --model "$T/q8.gguf" --tokens $TOKENS --n 0 --threads 1 >"$T/mfc.json"
    MFC_NODE_MODULES="$NODE_MODULES" node "$REF" --model "$T/q8.gguf" --tokens $TOKENS --n 0 \
        --threads 1 --flash-attn off >"$T/ref.json"
    run python3 "$CMP" "$T/mfc.json" "$T/ref.json" 5e-3
    echo "# $output" >&3
    [ "$status" -eq 0 ]
}

@test "build --quantize with a merged adapter requantizes once; a quantized source is refused" {
    printf '%s\n' "FROM ./base-f16.gguf" "ADAPTER --merge ./a.gguf" >"$CTX/Modelfile"
    run "$MFC" build -q -t qm --quantize Q4_K_M "$CTX"
    [ "$status" -eq 0 ]
    "$MFC" lora merge "$CTX/base-f16.gguf" "$CTX/a.gguf" -o "$T/want.gguf" --quantize Q4_K_M
    image_file qm /models/model.gguf "$T/got.gguf"
    cmp "$T/want.gguf" "$T/got.gguf"
    "$MFC" inspect "$T/got.gguf" | grep -q 'file type *Q4_K_M'
    printf '%s\n' "FROM ./base-q8.gguf" >"$CTX/Modelfile"
    run "$MFC" build -q -t bad --quantize Q4_K_M "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"quantization is only supported for F16, BF16 and F32 models"* ]]
    [[ "$output" == *"Q8_0"* ]]
    run "$MFC" inspect bad
    [ "$status" -ne 0 ]
    # up to F16 is no requantization: allowed from a quantized base
    run "$MFC" lora merge "$CTX/base-q8.gguf" "$CTX/a.gguf" --quantize F16 -o "$T/up.gguf"
    [ "$status" -eq 0 ]
    "$MFC" inspect "$T/up.gguf" | grep -q 'tensor types *F32 5, F16 16'
}

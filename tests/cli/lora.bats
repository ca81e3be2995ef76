#!/usr/bin/env bats
# lora.bats: LoRA adapters end to end: PEFT directories (written by
# tests/cli/peft_ref.py with PEFT's names and shapes) convert to exactly the
# tensors llama.cpp's convert_lora_to_gguf.py writes (peft_ref.py verify:
# its own safetensors and GGUF readers, gguf-py's name map, LlamaModel.permute
# as reshape/swapaxes on lists, bit for bit); the converted adapter runs in
# mfc's runtime and in llama.cpp with the same logits; `mfc lora check`
# refuses mismatched adapters naming the tensor and both shapes; mfc build
# converts `ADAPTER ./peft-dir`, checks adapters before baking, and mfc
# inspect lists every adapter with name, scale and rank (merged ones too).
# tests/data/peft holds adapters made by the real peft library (GPU host):
# they convert to the recorded layout and reproduce PeftModel's outputs.

load helpers

DIMS="--layers 2 --embd 32 --ff 48 --heads 4 --kv-heads 2 --vocab 300"

setup_file() {
    export D="$BATS_FILE_TMPDIR"
    MKMODEL="$MFC_BUILDDIR/tests/tools/mkmodel"
    "$MKMODEL" -o "$D/base.gguf" --preset toy $DIMS --seed 1 >/dev/null
    "$MKMODEL" -o "$D/lora.gguf" --preset toy $DIMS --lora 4 --targets q,v >/dev/null
    "$MKMODEL" -o "$D/wide.gguf" --preset toy --layers 2 --embd 64 --ff 48 --heads 4 \
        --kv-heads 2 --vocab 300 --lora 4 --targets q,v >/dev/null
    "$MKMODEL" -o "$D/deep.gguf" --preset toy --layers 3 --embd 32 --ff 48 --heads 4 \
        --kv-heads 2 --vocab 300 --lora 4 --targets q,v >/dev/null
}

setup() {
    T="$BATS_TEST_TMPDIR"
    REF="$MFC_SRCDIR/tests/cli/peft_ref.py"
    export MFC_HOME="$T/store" MFC_SERVE=/bin/echo
}

peft() { python3 "$REF" make "$@" --vocab 300; }

@test "a PEFT directory converts to what convert_lora_to_gguf.py writes (names, shapes, q/k permutation, embedding, alpha)" {
    peft "$T/p" --targets q,k,v,o,gate,up,down,embed --norms --alpha 16
    run "$MFC" lora convert "$T/p" --base "$D/base.gguf" -o "$T/out.gguf"
    [ "$status" -eq 0 ]
    [[ "$output" == *"rank: 4"* ]]
    [[ "$output" == *"alpha: 16 (scale = 4 x user scale)"* ]]
    [[ "$output" == *"15 pairs in 2 layers"* ]]
    [[ "$output" == *"4 q/k lora_b permuted"* ]]
    run python3 "$REF" verify "$T/p" "$T/out.gguf" --arch llama --heads 4 --kv-heads 2
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$output" = "ok: 32 tensors" ]
    # the reference really checks the permutation: other head counts disagree
    run python3 "$REF" verify "$T/p" "$T/out.gguf" --arch llama --heads 2 --kv-heads 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"blk.0.attn_q.weight.lora_b: element"* ]]
    [[ "$output" == *"blk.0.attn_k.weight.lora_b: element"* ]]
    ! [[ "$output" == *"attn_v"* ]]
}

@test "F16, BF16 and F64 halves, rank 8, use_rslora (alpha written as alpha*sqrt(r))" {
    for dt in F16 BF16 F64; do
        peft "$T/$dt" --dtype $dt --rank 8 --rslora --seed 7 --targets q,k,v,down
        run "$MFC" lora convert "$T/$dt" --base "$D/base.gguf" -o "$T/$dt.gguf" --json
        [ "$status" -eq 0 ]
        [ "$(jq -r .peft.use_rslora <<<"$output")" = true ]
        [ "$(jq -r '.alpha * 1000 | round' <<<"$output")" = 22627 ] # 8 * sqrt(8)
        run python3 "$REF" verify "$T/$dt" "$T/$dt.gguf" --arch llama --heads 4 --kv-heads 2
        echo "$dt: $output"
        [ "$status" -eq 0 ]
    done
}

@test "the converted adapter runs: mfc's runtime, mfc lora merge and llama.cpp agree" {
    EVAL="$MFC_BUILDDIR/tests/tools/mfc-eval"
    peft "$T/p" --alpha 16 --seed 3
    "$MFC" lora convert "$T/p" --base "$D/base.gguf" -o "$T/a.gguf" >/dev/null
    "$EVAL" --model "$D/base.gguf" --tokens 1,2,3,4 --kv f32 >"$T/base.json"
    "$EVAL" --model "$D/base.gguf" --lora "$T/a.gguf" --tokens 1,2,3,4 --kv f32 >"$T/rt.json"
    "$MFC" lora merge "$D/base.gguf" "$T/a.gguf" -o "$T/merged.gguf" >/dev/null
    "$EVAL" --model "$T/merged.gguf" --tokens 1,2,3,4 --kv f32 >"$T/merged.json"
    python3 - "$T" <<'EOF'
import json, sys
t = sys.argv[1]
b, r, m = (json.load(open(f"{t}/{n}.json"))["logits"] for n in ("base", "rt", "merged"))
d_adapter = max(abs(x - y) for x, y in zip(b, r))
d_merge = max(abs(x - y) for x, y in zip(r, m))
print("adapter moves logits by", d_adapter, "runtime vs merged", d_merge)
assert d_adapter > 1e-2, d_adapter
assert d_merge < 1e-5, d_merge
EOF
    NODE_MODULES="${MFC_NODE_MODULES:-$MFC_SRCDIR/tests/tools/node/node_modules}"
    command -v node >/dev/null || skip "node is not installed (llama.cpp comparison)"
    [ -d "$NODE_MODULES/node-llama-cpp" ] || skip "node-llama-cpp is not installed at $NODE_MODULES"
    MFC_NODE_MODULES="$NODE_MODULES" node "$MFC_SRCDIR/tests/tools/llama-logits.mjs" \
        --model "$D/base.gguf" --lora "$T/a.gguf" --tokens 1,2,3,4 --kv f32 >"$T/llama.json"
    python3 - "$T" <<'EOF'
import json, math, sys
t = sys.argv[1]
ll = json.load(open(f"{t}/llama.json"))["logprobs"]
lg = json.load(open(f"{t}/rt.json"))["logits"]
m = max(lg)
z = m + math.log(sum(math.exp(x - m) for x in lg))
d = max(abs(a - (b - z)) for a, b in zip(ll, lg))
print("llama.cpp vs mfc log-probs:", d)
assert d < 5e-3, d
EOF
}

@test "on a converted HF base, the converted adapter equals PEFT's merge_and_unload converted (q/k rows follow the base's permutation)" {
    EVAL="$MFC_BUILDDIR/tests/tools/mfc-eval"
    python3 "$MFC_SRCDIR/tests/cli/hf_mkdir.py" "$T/hf" --layers 2 --embd 32 --ff 48 --heads 4 \
        --kv-heads 2 --dtype F32 >/dev/null
    "$MFC" convert "$T/hf" --outtype f32 -o "$T/base.gguf" >/dev/null
    # runtime: projections only
    python3 "$REF" make "$T/p" --vocab 306 --alpha 16 --targets q,k,v,o,gate,up,down --seed 11
    python3 "$REF" merge-hf "$T/hf" "$T/p" "$T/hf-merged"
    "$MFC" convert "$T/hf-merged" --outtype f32 -o "$T/ref.gguf" >/dev/null
    "$MFC" lora convert "$T/p" --base "$T/base.gguf" -o "$T/a.gguf" >/dev/null
    "$EVAL" --model "$T/base.gguf" --lora "$T/a.gguf" --tokens 1,2,3,4,5 --kv f32 >"$T/rt.json"
    "$EVAL" --model "$T/ref.gguf" --tokens 1,2,3,4,5 --kv f32 >"$T/ref.json"
    # merge: embedding and lm_head too, with use_rslora and a scale
    python3 "$REF" make "$T/p2" --vocab 306 --alpha 16 --targets q,k,down,embed,lm_head --seed 12 --rslora
    python3 "$REF" merge-hf "$T/hf" "$T/p2" "$T/hf-merged2" --scale 0.5
    "$MFC" convert "$T/hf-merged2" --outtype f32 -o "$T/ref2.gguf" >/dev/null
    "$MFC" lora convert "$T/p2" --base "$T/base.gguf" -o "$T/a2.gguf" 2>/dev/null >/dev/null
    "$MFC" lora merge "$T/base.gguf" "$T/a2.gguf:0.5" -o "$T/m2.gguf" >/dev/null
    "$EVAL" --model "$T/m2.gguf" --tokens 1,2,3,4,5 --kv f32 >"$T/m2.json"
    "$EVAL" --model "$T/ref2.gguf" --tokens 1,2,3,4,5 --kv f32 >"$T/ref2.json"
    python3 - "$T" <<'EOF'
import json, sys
t = sys.argv[1]
for a, b in (("rt", "ref"), ("m2", "ref2")):
    x, y = (json.load(open(f"{t}/{n}.json"))["logits"] for n in (a, b))
    d = max(abs(p - q) for p, q in zip(x, y))
    print(a, "vs", b, d)
    assert d < 1e-4, (a, d)
EOF
}

@test "real PEFT adapters (tests/data/peft, made by peft 0.21): the recorded GGUF layout, and PeftModel's tokens and logits at run time and merged" {
    EVAL="$MFC_BUILDDIR/tests/tools/mfc-eval"
    DATA="$MFC_SRCDIR/tests/data"
    "$MFC" convert "$DATA/hf/tiny-llama" --outtype f32 -o "$T/base.gguf" >/dev/null
    for n in tiny-lora tiny-lora-f16; do
        "$MFC" lora convert "$DATA/peft/$n" --base "$T/base.gguf" -o "$T/$n.gguf" >/dev/null
        run python3 "$REF" fixture "$DATA/peft/expected.json" $n "$T/$n.gguf"
        echo "$n: $output"
        [ "$status" -eq 0 ]
        run python3 "$REF" verify "$DATA/peft/$n" "$T/$n.gguf" --arch llama --heads 4 --kv-heads 2
        [ "$status" -eq 0 ]
        "$MFC" lora merge "$T/base.gguf" "$T/$n.gguf" -o "$T/$n-merged.gguf" >/dev/null
        for i in 0 1 2; do
            ids=$(jq -r --arg n $n --argjson i $i '.adapters[$n].prompts[$i].prompt_ids | join(",")' \
                "$DATA/peft/expected.json")
            "$EVAL" --model "$T/base.gguf" --lora "$T/$n.gguf" --tokens "$ids" --n 16 --kv f32 \
                >"$T/$n-$i.json"
            "$EVAL" --model "$T/$n-merged.gguf" --tokens "$ids" --n 16 --kv f32 >"$T/$n-$i-m.json"
        done
    done
    python3 - "$T" "$DATA/peft/expected.json" <<'EOF'
import json, sys
t, exp = sys.argv[1], json.load(open(sys.argv[2]))["adapters"]
for n, e in exp.items():
    for i, p in enumerate(e["prompts"]):
        r = json.load(open(f"{t}/{n}-{i}.json"))
        m = json.load(open(f"{t}/{n}-{i}-m.json"))
        d = max(abs(a - b) for a, b in zip(r["logits"], p["last_logits"]))
        print(n, i, "logits vs PeftModel", d, "greedy", r["generated"] == p["greedy"],
              "merged greedy", m["generated"] == e["merged_model_greedy"][i])
        # the F16 adapter's bytes are exact (fixture check above); the runtime
        # rounds its LoRA intermediates as llama.cpp does, PeftModel upcasts
        # (measured 2.8e-4 for F16, 3e-6 for F32)
        assert d < (2e-3 if "f16" in n else 1e-4), d
        assert r["generated"] == p["greedy"], (r["generated"], p["greedy"])
        assert m["generated"] == e["merged_model_greedy"][i]
EOF
}

@test "mfc lora check: a matching GGUF adapter passes with a summary" {
    run "$MFC" lora check "$D/lora.gguf" --base "$D/base.gguf"
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "architecture: llama" ]]
    [[ "$output" == *"rank: 4"* ]]
    [[ "$output" == *"targets: attn_q attn_v"* ]]
    run "$MFC" lora check --json "$D/lora.gguf" --base "$D/base.gguf"
    [ "$(jq -r '.pairs, .layers, .rank_max' <<<"$output" | tr '\n' ' ')" = "4 2 4 " ]
}

@test "mfc lora check refuses another hidden size and a missing tensor, naming tensor and shapes" {
    run "$MFC" lora check "$D/wide.gguf" --base "$D/base.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"lora_a 'blk.0.attn_q.weight.lora_a' is [64, 4] but base tensor 'blk.0.attn_q.weight' is [32, 32]"* ]]
    run "$MFC" lora check "$D/deep.gguf" --base "$D/base.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"tensor 'blk.2.attn_q.weight.lora_a' adapts 'blk.2.attn_q.weight', which the base model"* ]]
    # a model is not an adapter, and an adapter is not a base
    run "$MFC" lora check "$D/base.gguf" --base "$D/base.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"is not a LoRA adapter"* ]]
    run "$MFC" lora check "$D/lora.gguf" --base "$D/lora.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"is itself an adapter"* ]]
    run "$MFC" lora check "$D/lora.gguf"
    [ "$status" -eq 2 ]
    [[ "$output" == *"--base MODEL.gguf is required"* ]]
}

@test "PEFT directories mfc cannot convert are refused with the reason" {
    peft "$T/m" --extra base_model.model.model.layers.0.mlp.experts.0.gate_proj.lora_A.weight
    run "$MFC" lora check "$T/m" --base "$D/base.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"tensor 'base_model.model.model.layers.0.mlp.experts.0.gate_proj.lora_A.weight' adapts module 'model.layers.0.mlp.experts.0.gate_proj', which mfc cannot map"* ]]
    peft "$T/e" --extra base_model.model.model.embed_tokens.weight
    run "$MFC" lora check "$T/e" --base "$D/base.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"unexpected tensor 'base_model.model.model.embed_tokens.weight': not a lora_A or lora_B tensor (the adapter carries whole embedding weights"* ]]
    peft "$T/d"
    sed -i 's/"use_dora": false/"use_dora": true/' "$T/d/adapter_config.json"
    run "$MFC" lora check "$T/d" --base "$D/base.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"use_dora is set"* ]]
    peft "$T/b"
    mv "$T/b/adapter_model.safetensors" "$T/b/adapter_model.bin"
    run "$MFC" lora check "$T/b" --base "$D/base.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"adapter_model.bin is a PyTorch pickle"* ]]
    # a PEFT adapter for another model: q_proj rows are not the base's
    python3 "$REF" make "$T/w" --vocab 300 --embd 64 --heads 4 --targets q
    run "$MFC" lora check "$T/w" --base "$D/base.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"lora_a 'blk.0.attn_q.weight.lora_a' is [64, 4] but base tensor 'blk.0.attn_q.weight' is [32, 32]"* ]]
    # a malformed safetensors header is named with its byte offset
    peft "$T/x"
    printf '\377\377\377\377\377\377\377\377' | dd of="$T/x/adapter_model.safetensors" conv=notrunc 2>/dev/null
    run "$MFC" lora check "$T/x" --base "$D/base.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"adapter_model.safetensors: byte 0: not a safetensors file"* ]]
    # a NaN (a diverged training run) is refused, naming the tensor and element
    peft "$T/n"
    python3 - "$T/n/adapter_model.safetensors" <<'EOF'
import json, struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", b[:8])[0]
t = json.loads(b[8:8 + n])["base_model.model.model.layers.1.mlp.up_proj.lora_B.weight"]
o = 8 + n + t["data_offsets"][0] + 4 * 5
b[o:o + 4] = struct.pack("<f", float("nan"))
open(sys.argv[1], "wb").write(b)
EOF
    run "$MFC" lora convert "$T/n" --base "$D/base.gguf" -o "$T/nan.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"tensor 'blk.1.ffn_up.weight.lora_b' (from 'base_model.model.model.layers.1.mlp.up_proj.lora_B.weight') holds a NaN or infinity (row 1, element 1)"* ]]
    [ ! -e "$T/nan.gguf" ]
    # nothing is left behind by a failed convert
    run "$MFC" lora convert "$T/m" --base "$D/base.gguf" -o "$T/none.gguf"
    [ "$status" -eq 1 ]
    [ ! -e "$T/none.gguf" ]
}

@test "no lora_alpha: converted without adapter.lora.alpha, with a warning that the raw scale is used" {
    peft "$T/p" --no-alpha
    run "$MFC" lora convert "$T/p" --base "$D/base.gguf" -o "$T/a.gguf"
    [ "$status" -eq 0 ]
    [[ "$output" == *"warning: no adapter.lora.alpha: the raw scale is used"* ]]
    run python3 "$REF" verify "$T/p" "$T/a.gguf" --arch llama --heads 4 --kv-heads 2
    [ "$status" -eq 0 ]
    # mfc build says so once, on the adapter's check step
    mkdir -p "$T/ctx" && cp "$D/base.gguf" "$T/ctx/" && cp -r "$T/p" "$T/ctx/na"
    printf '%s\n' "FROM ./base.gguf" "ADAPTER ./na" >"$T/ctx/Modelfile"
    run "$MFC" build --progress plain "$T/ctx"
    [ "$status" -eq 0 ]
    [ "$(grep -c 'warning: no adapter.lora.alpha: the raw scale is used' <<<"$output")" -eq 1 ]
}

@test "mfc build: ADAPTER ./peft-dir converts, three ADAPTER lines (two named, one merged) are listed by mfc inspect" {
    C="$T/ctx"
    mkdir -p "$C"
    cp "$D/base.gguf" "$D/lora.gguf" "$C/"
    peft "$C/style" --alpha 16 --rank 8 --targets q,k,v,o
    peft "$T/m" --alpha 8 --rank 2 --seed 5
    "$MFC" lora convert "$T/m" --base "$D/base.gguf" -o "$C/fold.gguf" >/dev/null
    printf '%s\n' "FROM ./base.gguf" "ADAPTER --name=sql --scale=0.5 ./lora.gguf" \
        "ADAPTER --name=style ./style" "ADAPTER --merge --scale=0.25 ./fold.gguf" >"$C/Modelfile"
    run "$MFC" build --progress plain -t m:1 "$C"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"convert ADAPTER ./style DONE"* ]]
    run "$MFC" inspect m:1
    [ "$status" -eq 0 ]
    a=$(jq -c '[.adapters[] | [.name, .scale, .rank, .merged]]' <<<"$output")
    [ "$a" = '[["sql",0.5,4,false],["style",1,8,false],["fold",0.25,2,true]]' ]
    [ "$(jq -r '.adapters[1].targets' <<<"$output")" = "attn_q attn_k attn_v attn_output" ]
    [ "$(jq -r '.adapters[1].alpha' <<<"$output")" = 16 ]
    # the image as the base of mfc lora check (weights read in place)
    run "$MFC" lora check "$D/lora.gguf" --base m:1
    [ "$status" -eq 0 ]
    [[ "$output" == *"targets: attn_q attn_v"* ]]
    run "$MFC" lora check "$T/m" --base m:1
    [ "$status" -eq 0 ]
    run "$MFC" lora check "$D/wide.gguf" --base m:1
    [ "$status" -eq 1 ]
    [[ "$output" == *"is [64, 4] but base tensor 'blk.0.attn_q.weight' is [32, 32]"* ]]
    run "$MFC" lora check "$D/lora.gguf" --base nosuch:1
    [ "$status" -eq 1 ]
    [[ "$output" == *"no image tagged nosuch:1"* ]]
    # unchanged: all cached; an edited PEFT directory converts again
    run "$MFC" build --progress plain -t m:1 "$C"
    ! grep -q ' DONE in ' <<<"$output"
    peft "$C/style" --alpha 16 --rank 8 --targets q,k,v,o --seed 9
    run "$MFC" build --progress plain -t m:1 "$C"
    [ "$status" -eq 0 ]
    [[ "$output" == *"convert ADAPTER ./style DONE"* ]]
}

@test "mfc build: one PEFT directory named by six ADAPTER lines converts once, and steps with one key never share a temp file" {
    # each line was its own convert step with the same key; they wrote one
    # temp file and the first to finish removed the others' input. Now the
    # plan has one convert step for them (temp files are per step anyway)
    C="$T/same"
    mkdir -p "$C"
    cp "$D/base.gguf" "$C/"
    peft "$C/style" --alpha 16 --rank 16 --targets q,k,v,o,gate,up,down
    {
        echo "FROM ./base.gguf"
        echo "ADAPTER --merge --scale=0.25 ./style"
        for n in a b c d e; do echo "ADAPTER --name=$n ./style"; done
    } >"$C/Modelfile"
    for i in 1 2 3; do
        run "$MFC" build -j 6 --no-cache --progress plain -t same:1 "$C"
        [ "$status" -eq 0 ] || { echo "$output"; false; }
        # and the plan converts the directory once for all six lines
        [ "$(grep -c 'convert ADAPTER ./style DONE' <<<"$output")" -eq 1 ]
    done
    [ "$(ls "$MFC_HOME/tmp" | wc -l)" -eq 0 ]
    run "$MFC" inspect same:1
    [ "$(jq -c '[.adapters[] | .name]' <<<"$output")" = '["a","b","c","d","e","style"]' ]
}

@test "mfc build FROM a Hugging Face dir with a real PEFT ADAPTER: the baked adapter is mfc lora convert's output, byte for byte" {
    DATA="$MFC_SRCDIR/tests/data"
    C="$T/ctx"
    mkdir -p "$C"
    cp -r "$DATA/hf/tiny-llama" "$C/base"
    cp -r "$DATA/peft/tiny-lora" "$C/tl"
    printf '%s\n' "FROM ./base" "ADAPTER --name=tl ./tl" >"$C/Modelfile"
    run "$MFC" build --progress plain -t t:1 "$C"
    echo "$output"
    [ "$status" -eq 0 ]
    run "$MFC" inspect t:1
    [ "$(jq -c '[.adapters[] | [.name, .rank, .alpha, .pairs]]' <<<"$output")" = '[["tl",4,8,14]]' ]
    layer=$(jq -r '.manifest.layers[] | select(.annotations."org.cncf.model.filepath" == "/adapters/tl.gguf") | .digest' <<<"$output")
    # the layer is an uncompressed tar holding the GGUF; compare with a conversion by hand
    "$MFC" convert "$C/base" -o "$T/base.gguf" >/dev/null
    "$MFC" lora convert "$C/tl" --base "$T/base.gguf" -o "$T/tl.gguf" >/dev/null
    mkdir -p "$T/x"
    tar -xf "$MFC_HOME/blobs/sha256/${layer#sha256:}" -C "$T/x"
    cmp "$T/x/adapters/tl.gguf" "$T/tl.gguf"
}

@test "mfc build checks adapters before baking: a mismatched one fails naming tensor and shapes, no image" {
    C="$T/ctx"
    mkdir -p "$C"
    cp "$D/base.gguf" "$D/wide.gguf" "$C/"
    printf '%s\n' "FROM ./base.gguf" "ADAPTER ./wide.gguf" >"$C/Modelfile"
    run "$MFC" build -t bad:1 "$C"
    [ "$status" -eq 1 ]
    [[ "$output" == *"Modelfile:2: ADAPTER ./wide.gguf"*"lora_a 'blk.0.attn_q.weight.lora_a' is [64, 4] but base tensor 'blk.0.attn_q.weight' is [32, 32]"* ]]
    run "$MFC" inspect bad:1
    [ "$status" -ne 0 ]
    # a directory that is not a PEFT adapter
    mkdir -p "$C/notpeft" && echo '{}' >"$C/notpeft/config.json"
    printf '%s\n' "FROM ./base.gguf" "ADAPTER ./notpeft" >"$C/Modelfile"
    run "$MFC" build -t bad:2 "$C"
    [ "$status" -eq 1 ]
    [[ "$output" == *"ADAPTER ./notpeft"*"no PEFT adapter (adapter_config.json"* ]]
}

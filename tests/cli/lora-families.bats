#!/usr/bin/env bats
# lora-families.bats: LoRA adapters on the families beyond Llama.
#
# PEFT: on a Hugging Face directory of each family (hf_mkdir.py --family)
# converted by mfc, a PEFT adapter (peft_ref.py make; Phi-3's fused
# qkv_proj and gate_up_proj among the targets) converted by `mfc lora
# convert` must give, applied at run time (mfc-eval --lora) and merged
# (`mfc lora merge`), the logits of PEFT's merge_and_unload on the HF weights
# (peft_ref.py merge-hf, then converted): within 1e-4, F32. That holds only
# if NeoX families keep lora_b's rows in HF order and the runtime splits a
# fused pair's lora_b into its q/k/v and gate/up row views.
# llama.cpp: mkmodel adapters (fused attn_qkv and ffn_up, q/k/v/o of an
# expert model, every projection of Gemma 2) run in mfc-eval and in
# llama.cpp (node-llama-cpp) to the same logits (5e-4 of their spread, as
# engine-numerics.bats's LoRA jobs), 8 greedy tokens identical.
# An adapter of another architecture is refused naming both.

load helpers

BUILD="${MFC_BUILDDIR:-$BATS_TEST_DIRNAME/../..}"
EVAL="$BUILD/tests/tools/mfc-eval"
MKMODEL="$BUILD/tests/tools/mkmodel"
MKDIR="$MFC_SRCDIR/tests/cli/hf_mkdir.py"
PEFT="$MFC_SRCDIR/tests/cli/peft_ref.py"
REF="$MFC_SRCDIR/tests/tools/llama-logits.mjs"
CMP="$MFC_SRCDIR/tests/cli/engine_numerics.py"
NODE_MODULES="${MFC_NODE_MODULES:-$MFC_SRCDIR/tests/tools/node/node_modules}"
PROMPT=1,17,200,33,4,250,61,7,88,9,100,11,30,13,14,41,16,170,18,190,20,21,220,23

setup() {
    T=$BATS_TEST_TMPDIR
}

# peft_family FAMILY VOCAB TARGETS: runtime and merged adapters equal the
# merge_and_unload reference.
peft_family() {
    local f=$1 vocab=$2 targets=$3
    python3 "$MKDIR" "$T/$f" --family "$f" >/dev/null
    "$MFC" convert "$T/$f" --outtype f32 -o "$T/$f.gguf" >/dev/null
    python3 "$PEFT" make "$T/$f-p" --vocab "$vocab" --ff 64 --alpha 16 --targets "$targets" --seed 21
    python3 "$PEFT" merge-hf "$T/$f" "$T/$f-p" "$T/$f-merged" --scale 0.5
    "$MFC" convert "$T/$f-merged" --outtype f32 -o "$T/$f-ref.gguf" >/dev/null
    "$MFC" lora convert "$T/$f-p" --base "$T/$f.gguf" -o "$T/$f-a.gguf" >/dev/null
    "$MFC" lora merge "$T/$f.gguf" "$T/$f-a.gguf:0.5" -o "$T/$f-m.gguf" >/dev/null
    "$EVAL" --model "$T/$f.gguf" --lora "$T/$f-a.gguf" --lora-scale 0.5 --tokens "$PROMPT" \
        --kv f32 --threads 1 >"$T/rt.json"
    "$EVAL" --model "$T/$f-m.gguf" --tokens "$PROMPT" --kv f32 --threads 1 >"$T/m.json"
    "$EVAL" --model "$T/$f-ref.gguf" --tokens "$PROMPT" --kv f32 --threads 1 >"$T/ref.json"
    "$EVAL" --model "$T/$f.gguf" --tokens "$PROMPT" --kv f32 --threads 1 >"$T/base.json"
    python3 - "$T" "$f" <<'PY'
import json, sys
t, f = sys.argv[1:]
ref, base = (json.load(open(f"{t}/{n}.json"))["logits"] for n in ("ref", "base"))
moved = max(abs(p - q) for p, q in zip(ref, base))
assert moved > 0.05, ("the adapter must change the logits", moved)
for n in ("rt", "m"):
    x = json.load(open(f"{t}/{n}.json"))["logits"]
    d = max(abs(p - q) for p, q in zip(x, ref))
    print(f, n, "vs merge_and_unload:", d, "(the adapter moves them by", moved, ")")
    assert d < 1e-4, (f, n, d)
PY
}

@test "PEFT on Phi-3: fused qkv_proj and gate_up_proj adapters equal merge_and_unload, run time and merged" {
    peft_family phi3 326 qkv,o,gateup,down
    # lora_b of the fused projection stays whole: [rank, q + k + v rows]
    python3 "$MFC_SRCDIR/tests/cli/hf_gguf.py" tensors "$T/phi3-a.gguf" |
        grep -qx "blk.0.attn_qkv.weight.lora_b F32 4,64"
    python3 "$MFC_SRCDIR/tests/cli/hf_gguf.py" tensors "$T/phi3-a.gguf" |
        grep -qx "blk.1.ffn_up.weight.lora_b F32 4,128"
}

@test "PEFT on Qwen2 and Gemma 2: q/k lora_b rows unpermuted (NeoX), every projection" {
    peft_family qwen2 306 q,k,v,o,gate,up,down
    peft_family gemma2 324 q,k,v,o,gate,up,down
}

@test "llama.cpp's LoRA and mfc's agree on fused attn_qkv/ffn_up (phi3), an expert model's q/k/v/o (qwen3moe), gemma2" {
    command -v node >/dev/null || skip "node is not installed"
    [ -d "$NODE_MODULES/node-llama-cpp" ] || skip "node-llama-cpp is not installed"
    declare -A M=(
        [phi3]="--arch phi3 --fused-qkv --seed 5"
        [moe]="--arch qwen3moe --head-dim 96 --experts 8 --experts-used 2 --ff-exp 128 --seed 6"
        [gemma2]="--arch gemma2 --swa 16 --seed 7"
    )
    declare -A TG=([phi3]=q,k,v,o,gate,up,down [moe]=q,k,v,o [gemma2]=q,k,v,o,gate,up,down)
    for m in "${!M[@]}"; do
        # shellcheck disable=SC2086
        "$MKMODEL" -o "$T/$m.gguf" ${M[$m]} >/dev/null
        # shellcheck disable=SC2086
        "$MKMODEL" -o "$T/$m-lora.gguf" ${M[$m]} --lora 8 --targets "${TG[$m]}" >/dev/null
        "$EVAL" --model "$T/$m.gguf" --lora "$T/$m-lora.gguf" --lora-scale 0.7 --tokens "$PROMPT" \
            --n 8 --threads 1 --kv f32 >"$T/$m.mfc.json"
        printf '{"out": "%s", "args": ["--model", "%s", "--lora", "%s", "--lora-scale", "0.7", "--tokens", "%s", "--n", "8", "--threads", "1", "--flash-attn", "off", "--kv", "f32"]}\n' \
            "$T/$m.ref.json" "$T/$m.gguf" "$T/$m-lora.gguf" "$PROMPT" >>"$T/jobs"
    done
    python3 "$MFC_SRCDIR/tests/cli/hf_gguf.py" tensors "$T/phi3-lora.gguf" |
        grep -qx "blk.0.attn_qkv.weight.lora_b F32 8,512"
    node "$REF" --jobs "$T/jobs"
    for m in "${!M[@]}"; do
        run python3 "$CMP" "$T/$m.mfc.json" "$T/$m.ref.json" 5e-4 --gen 8
        echo "# $m: $output" >&3
        [ "$status" -eq 0 ]
    done
}

@test "an adapter for another architecture, or a fused lora_b of the wrong height, is refused naming it" {
    "$MKMODEL" -o "$T/g.gguf" --arch gemma2 >/dev/null
    "$MKMODEL" -o "$T/q.gguf" --arch qwen2 >/dev/null
    "$MKMODEL" -o "$T/q-lora.gguf" --arch qwen2 --lora 4 --targets q,v >/dev/null
    run "$EVAL" --model "$T/g.gguf" --lora "$T/q-lora.gguf" --tokens 1 --n 0
    [ "$status" -ne 0 ]
    [[ "$output" == *"adapter architecture 'qwen2' does not match the base model's 'gemma2'"* ]]
    "$EVAL" --model "$T/q.gguf" --lora "$T/q-lora.gguf" --tokens 1 --n 0 >/dev/null
    "$MKMODEL" -o "$T/p.gguf" --arch phi3 --fused-qkv >/dev/null
    "$MKMODEL" -o "$T/p-lora.gguf" --arch phi3 --fused-qkv --lora 4 --targets q >/dev/null
    python3 "$MFC_SRCDIR/tests/tools/gguf_edit.py" "$T/p-lora.gguf" "$T/bad.gguf" \
        --shape blk.0.attn_qkv.weight.lora_b=4,256
    run "$EVAL" --model "$T/p.gguf" --lora "$T/bad.gguf" --tokens 1 --n 0
    echo "$output"
    [ "$status" -ne 0 ]
    [[ "$output" == *"do not fit base tensor 'blk.0.attn_qkv.weight' [256, 512]"* ]]
}

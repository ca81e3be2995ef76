#!/usr/bin/env bats
# families.bats: every model family of common/arch.h through mfc's engine
# (tests/tools/mfc-eval, CPU backend) against llama.cpp (node-llama-cpp
# 3.21.1, tests/tools/llama-logits.mjs) on seeded mkmodel GGUFs of that
# family; and the loader's refusals of broken files, each naming the tensor
# or key (tests/tools/gguf_edit.py breaks them).
#
# The 40-token prompt is longer than the 16-position sliding window the
# Gemma and gpt-oss models get, so their sliding layers drop positions. Tolerances (the
# score of engine_numerics.py: max |dlogprob| over the logits' std):
#   1e-4  F32 weights and an F32 KV cache on both sides: the same function
#         up to float summation order (measured 1e-6 .. 2e-5).
#   1e-2  F16 weights and an F16 KV cache: llama.cpp's batched F16 products
#         differ from its one-row ones, and a last-bit difference can round
#         a normalised q element (Qwen3, Gemma 3) to the next fp16 value
#         (measured 1e-4 .. 3e-3).
#   MXFP4 experts (gpt-oss): 1e-4 on a 1-token prompt, where both engines
#         dot the same Q8_0 activation codes against the same E2M1 codes;
#         0.15 on the whole prompt, as engine-numerics.bats bounds
#         quantized weights: a last-bit difference can move an activation
#         across a rounding boundary of its 8-bit code, and with every
#         matrix Q8_0 such a flip can also change an expert choice
#         (measured 1e-6 for MXFP4 experts with F32 or F16 around them,
#         1e-6 and, for some seeds, 1e-3 .. 6e-2 for the MXFP4_MOE mix).
# Greedy continuations of 16 tokens must be identical (the F16 ones may
# differ only where the two best logits are nearer than the score).

load helpers

BUILD="${MFC_BUILDDIR:-$BATS_TEST_DIRNAME/../..}"
MKMODEL="$BUILD/tests/tools/mkmodel"
EVAL="$BUILD/tests/tools/mfc-eval"
REF="$MFC_SRCDIR/tests/tools/llama-logits.mjs"
CMP="$MFC_SRCDIR/tests/cli/engine_numerics.py"
EDIT="$MFC_SRCDIR/tests/tools/gguf_edit.py"
NODE_MODULES="${MFC_NODE_MODULES:-$MFC_SRCDIR/tests/tools/node/node_modules}"
PROMPT=1,17,200,33,4,250,61,7,88,9,100,11,300,13,14,415,16,170,18,190,20,21,220,23,24,25,26,27,28,29,30,310,32,33,340,35,36,37,380,39

# gpt-oss as its GGUFs are: q heads wider than the embedding (4 x 80 over
# 256), q/k/v/o biases, sinks, every other layer sliding (16 positions),
# YaRN, 4 experts of 128 with biases, top-2
GPTOSS="--arch gpt-oss --head-dim 80 --experts 4 --experts-used 2 --ff-exp 128 --swa 16"
GPTOSS+=" --rope-scaling yarn --rope-factor 4 --rope-orig-ctx 128"
# name: mkmodel arguments of each family's model
declare -A FAM=(
    [mixtral]="--experts 4 --experts-used 2"
    [qwen2]="--arch qwen2"
    [qwen2-yarn]="--arch qwen2 --rope-scaling yarn --rope-factor 4 --rope-orig-ctx 128"
    [qwen3]="--arch qwen3 --head-dim 96"
    [qwen3moe]="--arch qwen3moe --head-dim 96 --experts 8 --experts-used 2 --ff-exp 128"
    [gemma2]="--arch gemma2 --swa 16"
    [gemma3]="--arch gemma3 --swa 16 --swa-pattern 2"
    [phi3]="--arch phi3 --fused-qkv"
    [phi3-long]="--arch phi3 --rope-factors 256 --ctx 4096"
    [gpt-oss]="$GPTOSS"
)
# name: the context both engines are told (LongRoPE picks its factors by it)
declare -A CTX=([phi3-long]=4096)

job() { # TAG MODEL N ARGS...: mfc-eval now, llama.cpp queued
    local tag=$1 model=$2 n=$3 a
    shift 3
    "$EVAL" --model "$model" --tokens "$PROMPT" --n "$n" --threads 1 "$@" >"$D/$tag.mfc.json"
    a=$(printf '"%s",' --model "$model" --tokens "$PROMPT" --n "$n" --threads 1 --flash-attn off "$@")
    printf '{"out": "%s", "args": [%s]}\n' "$D/$tag.ref.json" "${a%,}" >>"$D/jobs"
}

setup_file() {
    command -v node >/dev/null || skip "node is not installed"
    [ -d "$NODE_MODULES/node-llama-cpp" ] ||
        skip "node-llama-cpp is not installed at $NODE_MODULES (cd tests/tools/node && npm ci)"
    [ -x "$MKMODEL" ] && [ -x "$EVAL" ] || skip "mkmodel or mfc-eval is not built"
    D=$BATS_FILE_TMPDIR
    for f in "${!FAM[@]}"; do
        for t in f32 f16; do
            # shellcheck disable=SC2086
            "$MKMODEL" -o "$D/$f-$t.gguf" ${FAM[$f]} --type "$t"
        done
        ctx=()
        [ -z "${CTX[$f]:-}" ] || ctx=(--ctx "${CTX[$f]}")
        job "$f-f32" "$D/$f-f32.gguf" 16 --kv f32 "${ctx[@]}"
        job "$f-f16" "$D/$f-f16.gguf" 16 --kv f16 "${ctx[@]}"
    done
    job phi3-short "$D/phi3-long-f32.gguf" 0 --kv f32 --ctx 128
    # gpt-oss with MXFP4 experts: the rest F32, F16, or Q8_0 (llama.cpp's
    # MXFP4_MOE mix); one token, then the whole prompt
    for t in f32 f16 mxfp4_moe; do
        kv=f32
        [ "$t" != f16 ] || kv=f16
        # shellcheck disable=SC2086
        "$MKMODEL" -o "$D/gpt-oss-mx-$t.gguf" $GPTOSS --type "$t" --expert-type mxfp4
        PROMPT=1 job "gpt-oss-mx-$t-1" "$D/gpt-oss-mx-$t.gguf" 0 --kv "$kv"
        job "gpt-oss-mx-$t" "$D/gpt-oss-mx-$t.gguf" 0 --kv "$kv"
    done
    node "$REF" --jobs "$D/jobs"
}

agree() { # TAG TOL [--gen N]
    local tag=$1 tol=$2 D=$BATS_FILE_TMPDIR
    shift 2
    run python3 "$CMP" "$D/$tag.mfc.json" "$D/$tag.ref.json" "$tol" "$@"
    echo "# $tag: $output" >&3
    [ "$status" -eq 0 ]
}

family() { # NAME: F32 within 1e-4, F16 within 1e-2, 16 greedy tokens each
    agree "$1-f32" 1e-4 --gen 16
    agree "$1-f16" 1e-2 --gen 16
}

@test "llama with experts (Mixtral): routed FFN, top-2 of 4 renormalised" { family mixtral; }
@test "qwen2: q/k/v biases, NeoX RoPE, tied embeddings" { family qwen2; }
@test "qwen2 with YaRN scaling (factor 4 over 128 positions)" { family qwen2-yarn; }
@test "qwen3: per-head q/k norms, head_dim 96 != 256/4" { family qwen3; }
@test "qwen3moe: q/k norms and 8 experts of 128, top-2" { family qwen3moe; }
@test "gemma2: sandwich norms, GELU, sqrt(embd) scale, soft-caps, sliding layers (16 positions)" {
    family gemma2
}
@test "gemma3: q/k norms, sliding layers with their own RoPE base (10000), pattern 2" {
    family gemma3
}
@test "phi3: fused attn_qkv and gate+up" { family phi3; }
@test "gpt-oss: sinks, q/k/v/o biases, biased experts, clamped SwiGLU, top-2 softmax gating, sliding layers, YaRN" {
    family gpt-oss
}
@test "gpt-oss with MXFP4 experts (the rest F32, F16 or Q8_0): 1-token prompt within 1e-4, 40-token within 0.15" {
    for t in f32 f16 mxfp4_moe; do
        agree "gpt-oss-mx-$t-1" 1e-4
        agree "gpt-oss-mx-$t" 0.15
    done
}
@test "phi3 LongRoPE: long factors past the 256-position original context, short ones within" {
    family phi3-long
    agree phi3-short 1e-4
    # the two factor tables must give different logits, or the test proves nothing
    run python3 -c 'import json,sys; a=json.load(open(sys.argv[1]))["logits"]; b=json.load(open(sys.argv[2]))["logits"]; sys.exit(0 if max(abs(x-y) for x,y in zip(a,b)) > 1e-3 else 1)' \
        "$BATS_FILE_TMPDIR/phi3-long-f32.mfc.json" "$BATS_FILE_TMPDIR/phi3-short.mfc.json"
    [ "$status" -eq 0 ]
}

# refuse EDITS... NEEDLE: the qwen3moe/gemma2 model broken by gguf_edit.py
# is refused by the loader with NEEDLE in the message.
refuse() {
    local src=$1 needle=$2 D=$BATS_FILE_TMPDIR
    shift 2
    python3 "$EDIT" "$D/$src" "$D/bad.gguf" "$@"
    run "$EVAL" --model "$D/bad.gguf" --tokens 1 --n 0
    echo "# $output" >&3
    [ "$status" -ne 0 ]
    [[ "$output" == *"$needle"* ]]
}

@test "broken family files are refused naming the tensor or key" {
    refuse qwen3-f32.gguf "tensor 'blk.1.attn_k_norm.weight' is missing" --drop blk.1.attn_k_norm.weight
    refuse qwen2-f32.gguf "tensor 'blk.0.attn_v.bias' has shape [64, 2], expected [128]" \
        --shape blk.0.attn_v.bias=64,2
    refuse qwen3moe-f32.gguf "key 'qwen3moe.expert_count' is 0" --set qwen3moe.expert_count=u32:0
    refuse qwen3moe-f32.gguf "'blk.0.ffn_gate_inp.weight' has shape [256, 8], expected [256, 16]" \
        --set qwen3moe.expert_count=u32:16
    refuse qwen3moe-f32.gguf "key 'qwen3moe.expert_used_count' is 9 (must be 1..8)" \
        --set qwen3moe.expert_used_count=u32:9
    refuse gemma2-f32.gguf "key 'gemma2.attention.sliding_window' is 0" \
        --set gemma2.attention.sliding_window=u32:0
    refuse gemma2-f32.gguf "tensor 'blk.1.post_ffw_norm.weight' is missing" --drop blk.1.post_ffw_norm.weight
    refuse phi3-f32.gguf "tensor 'blk.0.ffn_up.weight' has shape [512, 512], expected [256, 1024]" \
        --shape blk.0.ffn_up.weight=512,512
    refuse qwen2-f32.gguf "architecture 'falcon' is not supported (mfc runs llama, qwen2" \
        --set general.architecture=str:falcon
    refuse mixtral-f32.gguf "tensor 'blk.0.ffn_down_exps.weight' is missing" --drop blk.0.ffn_down_exps.weight
}

@test "broken gpt-oss files are refused naming the tensor or key" {
    refuse gpt-oss-f32.gguf "tensor 'blk.1.attn_sinks.weight' is missing" --drop blk.1.attn_sinks.weight
    refuse gpt-oss-f32.gguf "tensor 'blk.0.attn_output.bias' is missing" --drop blk.0.attn_output.bias
    refuse gpt-oss-f32.gguf "tensor 'blk.1.ffn_gate_inp.bias' is missing" --drop blk.1.ffn_gate_inp.bias
    refuse gpt-oss-f32.gguf "tensor 'blk.0.ffn_up_exps.bias' has shape [256, 2], expected [128, 4]" \
        --shape blk.0.ffn_up_exps.bias=256,2
    refuse gpt-oss-f32.gguf "tensor 'blk.0.post_attention_norm.weight' is missing" \
        --drop blk.0.post_attention_norm.weight
    refuse gpt-oss-f32.gguf "required key 'gpt-oss.attention.sliding_window' is missing" \
        --unset gpt-oss.attention.sliding_window
    refuse gpt-oss-f32.gguf "key 'gpt-oss.rope.dimension_count' is 64; a gpt-oss model rotates" \
        --set gpt-oss.rope.dimension_count=u32:64
    refuse gpt-oss-f32.gguf "key 'gpt-oss.expert_count' is 0" --set gpt-oss.expert_count=u32:0
}

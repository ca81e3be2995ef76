#!/usr/bin/env bats
# inspect-families.bats: `mfc inspect` and mfc-serve's /api/show report a
# model's family (common/arch.h: what users know it as, its traits) and the
# facts that set it apart: experts, the sliding window and its layer period,
# soft-caps (the family's defaults where the file has no key, as mfc-serve
# runs it), head_dim, RoPE scaling. Models from tests/tools/mkmodel --arch.

load helpers
load serve_helpers

setup_file() {
    D=$BATS_FILE_TMPDIR
    "$MKMODEL" -o "$D/gemma2.gguf" --arch gemma2 >/dev/null
    "$MKMODEL" -o "$D/moe.gguf" --arch qwen3moe --head-dim 96 --experts 8 --experts-used 2 \
        --ff-exp 128 >/dev/null
    "$MKMODEL" -o "$D/phi3.gguf" --arch phi3 --fused-qkv --rope-factors 256 --ctx 4096 >/dev/null
    "$MKMODEL" -o "$D/gemma3.gguf" --arch gemma3 --swa 16 --swa-pattern 2 >/dev/null
    "$MKMODEL" -o "$D/gpt-oss.gguf" --arch gpt-oss --experts 4 --experts-used 2 --ff-exp 128 \
        --swa 16 --type f16 --expert-type mxfp4 >/dev/null
}

setup() {
    D=$BATS_FILE_TMPDIR
}

@test "mfc inspect: Gemma 2 without window or soft-cap keys shows llama.cpp's defaults (4096, period 2, 50 and 30)" {
    run "$MFC" inspect "$D/gemma2.gguf"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"family           gemma2: Gemma 2"* ]]
    [[ "$output" == *"traits           neox_rope, gelu_gate, post_norms, embedding_scale, tied_output"* ]]
    [[ "$output" == *"sliding window   4096 positions, period 2, freq base 10000"* ]]
    [[ "$output" == *"soft-caps        attention 50, logits 30"* ]]
    run "$MFC" inspect --json "$D/gemma2.gguf"
    echo "$output" | jq -e '.family.sliding_window == {"window": 4096, "period": 2, "freq_base": 10000}'
    echo "$output" | jq -e '.family.experts == null and .family.supported'
}

@test "mfc inspect: experts, head_dim, q/k norms (qwen3moe); window keys and the sliding layers' base (gemma3); LongRoPE (phi3)" {
    run "$MFC" inspect --json "$D/moe.gguf"
    echo "$output" | jq -e '.family.experts == {"count": 8, "used": 2, "feed_forward_length": 128}'
    echo "$output" | jq -e '.head_dim == 96 and (.family.traits | index("qk_norm"))'
    echo "$output" | jq -e '.family.known_as | test("Qwen3-30B-A3B")'
    run "$MFC" inspect "$D/moe.gguf"
    [[ "$output" == *"experts          8, 2 used a token (feed forward 128)"* ]]
    run "$MFC" inspect --json "$D/gemma3.gguf"
    echo "$output" | jq -e '.family.sliding_window == {"window": 16, "period": 2, "freq_base": 10000}'
    echo "$output" | jq -e '.family.final_softcap == null'
    run "$MFC" inspect --json "$D/phi3.gguf"
    echo "$output" | jq -e '.rope.long_factors and .rope.original_context_length == 256'
    echo "$output" | jq -e '.family.traits | index("fused_qkv") and index("fused_gate_up")'
    run "$MFC" inspect "$D/phi3.gguf"
    [[ "$output" == *"original context 256, attn_factor "*", LongRoPE factors: yes"* ]]
}

@test "mfc inspect: gpt-oss's sinks, biases, clamped SwiGLU and gating, MXFP4 experts, every other layer sliding" {
    run "$MFC" inspect "$D/gpt-oss.gguf"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"family           gpt-oss: OpenAI gpt-oss-20b, gpt-oss-120b"* ]]
    [[ "$output" == *"traits           neox_rope, swiglu_oai_gate, qkv_bias, attn_sinks, o_bias, expert_biases, topk_softmax_gating"* ]]
    [[ "$output" == *"sliding window   16 positions, period 2, freq base 10000"* ]]
    run "$MFC" inspect --json "$D/gpt-oss.gguf"
    echo "$output" | jq -e '.tensor_types.MXFP4 == 6 and .family.experts.count == 4'
}

@test "mfc inspect names an architecture mfc-serve does not run" {
    python3 "$MFC_SRCDIR/tests/tools/gguf_edit.py" "$D/gemma2.gguf" "$D/falcon.gguf" \
        --set general.architecture=str:falcon
    run "$MFC" inspect "$D/falcon.gguf"
    [ "$status" -eq 0 ]
    [[ "$output" == *"family           falcon (mfc-serve does not run it)"* ]]
}

@test "/api/show: details.family is the architecture; model_info carries the mfc.* family facts" {
    serve_start "$D" moe.gguf
    run curl -sf "$SERVE_URL/api/show" -d '{"model":"moe"}'
    serve_stop
    echo "$output" | jq -e '.details.family == "qwen3moe" and .details.families == ["qwen3moe"]'
    echo "$output" | jq -e '.model_info["mfc.experts.count"] == 8 and .model_info["mfc.experts.used"] == 2'
    echo "$output" | jq -e '.model_info["mfc.head_dim"] == 96 and .model_info["mfc.family"] == "qwen3moe"'
    echo "$output" | jq -e '.model_info["qwen3moe.expert_count"] == 8'
    serve_start "$D" gemma2.gguf
    run curl -sf "$SERVE_URL/api/show" -d '{"model":"gemma2"}'
    serve_stop
    echo "$output" | jq -e '.model_info["mfc.sliding_window"] == 4096 and .model_info["mfc.sliding_window.period"] == 2'
    echo "$output" | jq -e '.model_info["mfc.attn_softcap"] == 50 and .model_info["mfc.final_softcap"] == 30'
    echo "$output" | jq -e '.model_info["mfc.family.known_as"] == "Gemma 2"'
}

#!/usr/bin/env bats
# convert-families.bats: mfc convert on Hugging Face directories of every
# family mfc converts besides Llama (tests/cli/hf_mkdir.py --family writes
# them with stdlib Python): the GGUF's keys, in order and with their types,
# and its tensors (names, types, shapes) are what convert_hf_to_gguf.py
# writes for the class (conversion/qwen.py, llama.py, gemma.py, phi.py at the
# pinned llama.cpp); the converted model runs in mfc's engine (mfc-eval, CPU)
# and in llama.cpp (node-llama-cpp) to the same logits (F32 weights and KV:
# within 1e-4 of the logits' spread, 8 greedy tokens identical), which shows
# the file is read the same way by both; Gemma's norms are stored + 1; the
# stacked experts of transformers 5 give the same tensors as per-expert
# weights; configs the runtime would compute differently are refused naming
# the key. Numerical agreement with transformers itself is
# tests/gpu/hf_families.py (a GPU host with torch).

load helpers

BUILD="${MFC_BUILDDIR:-$BATS_TEST_DIRNAME/../..}"
MKDIR="$MFC_SRCDIR/tests/cli/hf_mkdir.py"
GG="$MFC_SRCDIR/tests/cli/hf_gguf.py"
EVAL="$BUILD/tests/tools/mfc-eval"
REF="$MFC_SRCDIR/tests/tools/llama-logits.mjs"
CMP="$MFC_SRCDIR/tests/cli/engine_numerics.py"
NODE_MODULES="${MFC_NODE_MODULES:-$MFC_SRCDIR/tests/tools/node/node_modules}"
PROMPT=1,17,200,33,4,250,61,7,88,9,100,11,30,13,14,41,16,170,18,190,20,21,220,23

# name: hf_mkdir.py arguments
declare -A FAM=(
    [qwen2]="--family qwen2"
    [qwen3]="--family qwen3 --head-dim 16"
    [qwen3moe]="--family qwen3moe --head-dim 16"
    [qwen3moe-stacked]="--family qwen3moe --head-dim 16 --stacked-experts"
    [mixtral]="--family mixtral"
    [gemma2]="--family gemma2"
    [gemma3]="--family gemma3 --layers 3 --window 8"
    [gemma3mm]="--family gemma3mm --layers 3 --window 8"
    [phi3]="--family phi3"
)

setup_file() {
    D=$BATS_FILE_TMPDIR
    for f in "${!FAM[@]}"; do
        # shellcheck disable=SC2086
        python3 "$MKDIR" "$D/$f" ${FAM[$f]}
        "$MFC" convert "$D/$f" -o "$D/$f.gguf" --outtype f32 >/dev/null
    done
    command -v node >/dev/null && [ -d "$NODE_MODULES/node-llama-cpp" ] && [ -x "$EVAL" ] || return 0
    for f in "${!FAM[@]}"; do
        "$EVAL" --model "$D/$f.gguf" --tokens "$PROMPT" --n 8 --threads 1 --kv f32 >"$D/$f.mfc.json"
        printf '{"out": "%s", "args": ["--model", "%s", "--tokens", "%s", "--n", "8", "--threads", "1", "--flash-attn", "off", "--kv", "f32"]}\n' \
            "$D/$f.ref.json" "$D/$f.gguf" "$PROMPT" >>"$D/jobs"
    done
    node "$REF" --jobs "$D/jobs"
}

setup() {
    D=$BATS_FILE_TMPDIR
}

# keys FAMILY ARCH KEY...: the GGUF's keys (without the tokenizer's and
# general.*'s), in order, with types, are exactly the given list.
keys() {
    local f=$1 arch=$2
    shift 2
    python3 "$GG" kv "$D/$f.gguf" | cut -d' ' -f1-2 |
        grep -v '^tokenizer\.\|^general\.\(architecture\|type\|name\|quantization_version\)' \
            >"$D/$f.kv"
    printf '%s\n' "$@" | sed "s/^\\./$arch./" >"$D/$f.want"
    diff "$D/$f.want" "$D/$f.kv"
    python3 "$GG" kv "$D/$f.gguf" | grep -qx "general.architecture string $arch"
}

# tensors FAMILY LINE...: the tensors of the GGUF other than blocks 1.. are
# exactly the given "NAME TYPE DIMS" lines, in order.
tensors() {
    local f=$1
    shift
    python3 "$GG" tensors "$D/$f.gguf" | grep -v '^blk\.[1-9]' >"$D/$f.t"
    printf '%s\n' "$@" | diff - "$D/$f.t"
}

agree() {
    command -v node >/dev/null || skip "node is not installed"
    [ -f "$D/$1.ref.json" ] || skip "node-llama-cpp or mfc-eval is not available"
    run python3 "$CMP" "$D/$1.mfc.json" "$D/$1.ref.json" 1e-4 --gen 8
    echo "# $1: $output" >&3
    [ "$status" -eq 0 ]
}

@test "Qwen2ForCausalLM: TextModel's keys, q/k/v biases unpermuted, tied (no output.weight)" {
    keys qwen2 qwen2 ".block_count uint32" ".context_length uint32" ".embedding_length uint32" \
        ".feed_forward_length uint32" ".attention.head_count uint32" \
        ".attention.head_count_kv uint32" ".rope.freq_base float32" \
        ".attention.layer_norm_rms_epsilon float32" "general.file_type uint32"
    tensors qwen2 "token_embd.weight F32 32,306" "blk.0.attn_norm.weight F32 32" \
        "blk.0.attn_q.weight F32 32,32" "blk.0.attn_k.weight F32 32,16" \
        "blk.0.attn_v.weight F32 32,16" "blk.0.attn_output.weight F32 32,32" \
        "blk.0.attn_q.bias F32 32" "blk.0.attn_k.bias F32 16" "blk.0.attn_v.bias F32 16" \
        "blk.0.ffn_norm.weight F32 32" "blk.0.ffn_gate.weight F32 32,64" \
        "blk.0.ffn_up.weight F32 32,64" "blk.0.ffn_down.weight F32 64,32" \
        "output_norm.weight F32 32"
    run python3 "$GG" kv "$D/qwen2.gguf"
    [[ "$output" == *"tokenizer.ggml.pre string qwen2"* ]]
    [[ "$output" == *"tokenizer.ggml.eos_token_id uint32 305"* ]] # <|im_end|>
    # NeoX RoPE: q rows stay in the checkpoint's order
    PYTHONPATH="$MFC_SRCDIR/tests/cli" python3 - "$D/qwen2/model.safetensors" "$D/qwen2.gguf" <<'EOF'
import json, struct, sys
import hf_gguf
st = open(sys.argv[1], "rb").read()
(hl,) = struct.unpack_from("<Q", st, 0)
h = json.loads(st[8:8 + hl])
b, e = h["model.layers.0.self_attn.q_proj.weight"]["data_offsets"]
data = open(sys.argv[2], "rb").read()
kvs, tensors, base = hf_gguf.parse(data)
off = {n: o for n, t, d, o in tensors}["blk.0.attn_q.weight"]
assert data[base + off:base + off + e - b] == st[8 + hl + b:8 + hl + e]
EOF
    agree qwen2
}

@test "Qwen3ForCausalLM: head_dim 16 != 32/4 as key_length, q/k norms" {
    keys qwen3 qwen3 ".block_count uint32" ".context_length uint32" ".embedding_length uint32" \
        ".feed_forward_length uint32" ".attention.head_count uint32" \
        ".attention.head_count_kv uint32" ".rope.freq_base float32" \
        ".attention.layer_norm_rms_epsilon float32" ".attention.key_length uint32" \
        ".attention.value_length uint32" "general.file_type uint32"
    python3 "$GG" tensors "$D/qwen3.gguf" | grep -qx "blk.1.attn_k_norm.weight F32 16"
    python3 "$GG" tensors "$D/qwen3.gguf" | grep -qx "blk.0.attn_q.weight F32 32,64"
    python3 "$GG" tensors "$D/qwen3.gguf" | grep -qx "output.weight F32 32,306"
    agree qwen3
}

@test "Qwen3MoeForCausalLM: experts stacked into 3-D *_exps, router F32; transformers 5's stacked form gives the same file" {
    keys qwen3moe qwen3moe ".block_count uint32" ".context_length uint32" \
        ".embedding_length uint32" ".feed_forward_length uint32" ".attention.head_count uint32" \
        ".attention.head_count_kv uint32" ".rope.freq_base float32" \
        ".attention.layer_norm_rms_epsilon float32" ".expert_count uint32" \
        ".expert_used_count uint32" ".attention.key_length uint32" \
        ".attention.value_length uint32" "general.file_type uint32" \
        ".expert_feed_forward_length uint32"
    tensors qwen3moe "token_embd.weight F32 32,306" "blk.0.attn_norm.weight F32 32" \
        "blk.0.attn_q.weight F32 32,64" "blk.0.attn_k.weight F32 32,32" \
        "blk.0.attn_v.weight F32 32,32" "blk.0.attn_output.weight F32 64,32" \
        "blk.0.attn_q_norm.weight F32 16" "blk.0.attn_k_norm.weight F32 16" \
        "blk.0.ffn_norm.weight F32 32" "blk.0.ffn_gate_inp.weight F32 32,4" \
        "blk.0.ffn_gate_exps.weight F32 32,32,4" "blk.0.ffn_down_exps.weight F32 32,32,4" \
        "blk.0.ffn_up_exps.weight F32 32,32,4" "output_norm.weight F32 32" \
        "output.weight F32 32,306"
    # the same seeded weights, per expert or stacked: byte-identical tensor data
    cmp <(tail -c 200000 "$D/qwen3moe.gguf") <(tail -c 200000 "$D/qwen3moe-stacked.gguf")
    # expert 2's up rows are the checkpoint's, after its gate rows in gate_up_proj
    PYTHONPATH="$MFC_SRCDIR/tests/cli" python3 - "$D/qwen3moe/model.safetensors" "$D/qwen3moe.gguf" <<'EOF'
import json, struct, sys
import hf_gguf
st = open(sys.argv[1], "rb").read()
(hl,) = struct.unpack_from("<Q", st, 0)
h = json.loads(st[8:8 + hl])
b, e = h["model.layers.1.mlp.experts.2.up_proj.weight"]["data_offsets"]
data = open(sys.argv[2], "rb").read()
kvs, tensors, base = hf_gguf.parse(data)
off = {n: o for n, t, d, o in tensors}["blk.1.ffn_up_exps.weight"] + 2 * (e - b)
assert data[base + off:base + off + e - b] == st[8 + hl + b:8 + hl + e]
EOF
    agree qwen3moe
    agree qwen3moe-stacked
}

@test "MixtralForCausalLM: llama keys with expert counts, block_sparse_moe experts stacked" {
    keys mixtral llama ".block_count uint32" ".context_length uint32" ".embedding_length uint32" \
        ".feed_forward_length uint32" ".attention.head_count uint32" \
        ".attention.head_count_kv uint32" ".rope.freq_base float32" \
        ".attention.layer_norm_rms_epsilon float32" ".expert_count uint32" \
        ".expert_used_count uint32" "general.file_type uint32" ".vocab_size uint32" \
        ".rope.dimension_count uint32"
    python3 "$GG" tensors "$D/mixtral.gguf" | grep -qx "blk.1.ffn_down_exps.weight F32 64,32,4"
    python3 "$GG" tensors "$D/mixtral.gguf" | grep -qx "blk.1.ffn_gate_inp.weight F32 32,4"
    agree mixtral
}

@test "Gemma2ForCausalLM: Gemma2Model's own key order, soft-caps, window, sandwich norms + 1, lm_head skipped" {
    keys gemma2 gemma2 ".context_length uint32" ".embedding_length uint32" ".block_count uint32" \
        ".feed_forward_length uint32" ".attention.head_count uint32" \
        ".attention.head_count_kv uint32" ".attention.layer_norm_rms_epsilon float32" \
        ".attention.key_length uint32" ".attention.value_length uint32" \
        "general.file_type uint32" ".attn_logit_softcapping float32" \
        ".final_logit_softcapping float32" ".attention.sliding_window uint32"
    tensors gemma2 "token_embd.weight F32 32,324" "blk.0.attn_norm.weight F32 32" \
        "blk.0.attn_q.weight F32 32,32" "blk.0.attn_k.weight F32 32,16" \
        "blk.0.attn_v.weight F32 32,16" "blk.0.attn_output.weight F32 32,32" \
        "blk.0.post_attention_norm.weight F32 32" "blk.0.ffn_norm.weight F32 32" \
        "blk.0.post_ffw_norm.weight F32 32" "blk.0.ffn_gate.weight F32 32,64" \
        "blk.0.ffn_up.weight F32 32,64" "blk.0.ffn_down.weight F32 64,32" \
        "output_norm.weight F32 32"
    run python3 "$GG" kv "$D/gemma2.gguf"
    [[ "$output" == *"tokenizer.ggml.model string llama"* ]]
    [[ "$output" == *"tokenizer.ggml.add_space_prefix bool False"* ]]
    [[ "$output" == *"gemma2.attn_logit_softcapping float32 50"* ]]
    python3 - "$D/gemma2/model.safetensors" "$D/gemma2.gguf" "$GG" <<'EOF'
import json, struct, subprocess, sys
st = open(sys.argv[1], "rb").read()
(hl,) = struct.unpack_from("<Q", st, 0)
h = json.loads(st[8:8 + hl])
b, e = h["model.layers.1.pre_feedforward_layernorm.weight"]["data_offsets"]
src = struct.unpack("<%df" % ((e - b) // 4), st[8 + hl + b:8 + hl + e])
got = [float(x) for x in subprocess.check_output(
    ["python3", sys.argv[3], "f32", sys.argv[2], "blk.1.ffn_norm.weight"]).split()]
assert any(abs(v) > 0.01 for v in src)
want = [struct.unpack("<f", struct.pack("<f", v + 1.0))[0] for v in src]
assert all(abs(a - b) <= 1e-6 for a, b in zip(got, want)), (got[:3], want[:3])
EOF
    agree gemma2
}

@test "Gemma3ForCausalLM and Gemma3ForConditionalGeneration's text: TextModel then Gemma3Model's keys, a period-3 layer pattern written" {
    for f in gemma3 gemma3mm; do
        keys $f gemma3 ".block_count uint32" ".context_length uint32" \
            ".embedding_length uint32" ".feed_forward_length uint32" \
            ".attention.head_count uint32" ".attention.head_count_kv uint32" \
            ".rope.freq_base float32" ".rope.freq_base_swa float32" \
            ".attention.layer_norm_rms_epsilon float32" ".attention.key_length uint32" \
            ".attention.value_length uint32" "general.file_type uint32" \
            ".attention.sliding_window uint32" ".attention.sliding_window_pattern uint32"
        python3 "$GG" kv "$D/$f.gguf" | grep -qx "gemma3.attention.sliding_window_pattern uint32 3"
        python3 "$GG" kv "$D/$f.gguf" | grep -qx "gemma3.rope.freq_base_swa float32 10000"
        python3 "$GG" tensors "$D/$f.gguf" | grep -qx "blk.2.attn_q_norm.weight F32 8"
        ! python3 "$GG" tensors "$D/$f.gguf" | grep -q "vision\|output.weight"
    done
    # the text tower converts to the very same tensors
    cmp <(tail -c 150000 "$D/gemma3.gguf") <(tail -c 150000 "$D/gemma3mm.gguf")
    agree gemma3
    agree gemma3mm
}

@test "Phi3ForCausalLM: fused qkv and gate_up kept fused, LongRoPE tables and attn_factor" {
    keys phi3 phi3 ".rope.scaling.attn_factor float32" ".context_length uint32" \
        ".rope.scaling.original_context_length uint32" ".embedding_length uint32" \
        ".feed_forward_length uint32" ".block_count uint32" ".attention.head_count uint32" \
        ".attention.head_count_kv uint32" ".attention.layer_norm_rms_epsilon float32" \
        ".rope.dimension_count uint32" ".rope.freq_base float32" "general.file_type uint32" \
        ".attention.sliding_window uint32"
    tensors phi3 "rope_factors_long.weight F32 4" "rope_factors_short.weight F32 4" \
        "token_embd.weight F32 32,326" "blk.0.attn_norm.weight F32 32" \
        "blk.0.attn_qkv.weight F32 32,64" "blk.0.attn_output.weight F32 32,32" \
        "blk.0.ffn_norm.weight F32 32" "blk.0.ffn_up.weight F32 32,128" \
        "blk.0.ffn_down.weight F32 64,32" "output_norm.weight F32 32" "output.weight F32 32,326"
    # sqrt(1 + ln(256 / 64) / ln 64)
    python3 "$GG" kv "$D/phi3.gguf" | grep -qx "phi3.rope.scaling.attn_factor float32 1.1547"
    run python3 "$GG" f32 "$D/phi3.gguf" rope_factors_long.weight
    [ "$(echo $output)" = "1 1.25 1.5 1.75" ]
    agree phi3
}

@test "configs llama.cpp would run differently from transformers are refused naming the key" {
    bad() { # FAMILY PYTHON-EDIT NEEDLE
        rm -rf "$D/bad"
        cp -r "$D/$1" "$D/bad"
        python3 -c "import json,sys; p='$D/bad/config.json'; c=json.load(open(p)); $2; json.dump(c, open(p,'w'))"
        run "$MFC" convert "$D/bad" -o "$D/bad.gguf"
        echo "$output"
        [ "$status" -eq 1 ]
        [[ "$output" == *"$3"* ]]
        [ ! -e "$D/bad.gguf" ]
    }
    bad qwen2 "c['use_sliding_window']=True" '"use_sliding_window" true'
    bad qwen3moe "c['norm_topk_prob']=False" '"norm_topk_prob" false'
    bad qwen3moe "c['mlp_only_layers']=[1]" '"mlp_only_layers" lists dense layers'
    bad qwen3moe "c['num_experts']=5" "mlp.gate.weight has shape [4, 32], but config.json implies [5, 32]"
    bad qwen3moe-stacked "c['moe_intermediate_size']=8" "mlp.experts.gate_up_proj has shape [4, 64, 32], but config.json implies [4, 16, 32]"
    bad gemma2 "del c['attn_logit_softcapping']" '"attn_logit_softcapping" is missing'
    bad gemma2 "c['query_pre_attn_scalar']=16" '"query_pre_attn_scalar" is 16, but llama.cpp'"'"'s gemma2 scales q by 1/sqrt(8)'
    bad gemma3 "c['layer_types']=['full_attention','sliding_attention','full_attention']" 'layer_types is not a repeating pattern'
    bad phi3 "c['rope_scaling']['long_factor']=[1.0]" 'must each hold 4 numbers'
    bad phi3 "del c['original_max_position_embeddings']" '"original_max_position_embeddings" is missing'
    bad mixtral "c['num_experts_per_tok']=9" '"num_experts_per_tok" 9 must be 1..4'
    bad qwen3 "c['rope_scaling']={'rope_type':'llama3','factor':8}" 'rope_type llama3 is a Llama scaling'
}

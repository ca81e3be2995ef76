#!/usr/bin/env bats
# convert.bats: mfc convert and FROM ./dir on Hugging Face llama directories
# written by tests/cli/hf_mkdir.py (stdlib Python: safetensors, config.json,
# tokenizer.json). The converted GGUF must load in llama.cpp (node-llama-cpp)
# and continue a prompt with exactly the greedy tokens of the Python
# transformers forward in hf_mkdir.py (which uses HF's rotate-half RoPE, so
# a wrong q/k permutation changes them); the Llama 3 vocabulary must encode
# llama.cpp's test strings to the ids Hugging Face's tokenizer gave
# (ggml-vocab-llama-bpe.gguf.out) in llama.cpp and in mfc's runtime; the
# metadata keys and their types must be convert_hf_to_gguf.py's; malformed
# directories fail with a sentence naming the problem. tests/data/hf holds two
# checkpoints saved by transformers itself with the greedy tokens, top logits
# and tokenizer ids it produced: the conversions must reproduce them.

load helpers

MKDIR="$MFC_SRCDIR/tests/cli/hf_mkdir.py"
GG="$MFC_SRCDIR/tests/cli/hf_gguf.py"
LLAMA_REF="$MFC_SRCDIR/tests/tools/llama-ref.mjs"
LLAMA_TOK="$MFC_SRCDIR/tests/tools/llama-tok.mjs"
TOKTOOL="${MFC_BUILDDIR:-$BATS_TEST_DIRNAME/../..}/tests/tools/toktool"
VOCAB="$MFC_SHARED/data/vocab"
FIXTURE="$MFC_SRCDIR/tests/data/hf"

# Tokenizes the strings of INP (a llama.cpp vocab test .inp file) with GGUF
# through llama.cpp into $D/llama.json and through mfc (toktool) into
# $D/mfc.json (JSON lists of id lists).
tokenize_both() {
    local inp=$1 gguf=$2
    python3 - "$inp" >"$D/inp.json" <<'EOF'
import json, sys
s = open(sys.argv[1], encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
json.dump(s, sys.stdout)
EOF
    node "$LLAMA_TOK" ids --model "$gguf" --in "$D/inp.json" >"$D/llama.json"
    "$TOKTOOL" ids "$gguf" "$D/inp.json" >"$D/mfc.json"
}

# tokenize_both on llama.cpp's llama-bpe test strings; fails unless both give
# the first 46 id lists of OUT (a llama.cpp .out file: one line of ids a string).
llama3_ids_match() {
    local gguf=$1 out=$2
    tokenize_both "$VOCAB/ggml-vocab-llama-bpe.gguf.inp" "$gguf"
    python3 - "$out" "$D/llama.json" "$D/mfc.json" <<'EOF'
import json, sys
want = [[int(x) for x in l.split()] for l in open(sys.argv[1]).read().split("\n")[:46]]
for f in sys.argv[2:]:
    got = json.load(open(f))
    bad = [i for i in range(len(want)) if want[i] != got[i]]
    print(f, len(want) - len(bad), "of", len(want))
    assert len(got) == 46 and not bad, bad[:5]
EOF
}

setup() {
    export MFC_HOME="$BATS_TEST_TMPDIR/home"
    D="$BATS_TEST_TMPDIR"
}

# greedy GGUF PROMPT N: llama.cpp's greedy continuation, comma-separated.
greedy() {
    node "$LLAMA_REF" --model "$1" --tokens "$2" --n "$3" --top 1 |
        python3 -c 'import json,sys; print(",".join(map(str, json.load(sys.stdin)["generated"])))'
}

@test "GQA checkpoint: llama.cpp's greedy tokens equal the transformers forward (F32)" {
    require_llama
    want=$(python3 "$MKDIR" "$D/m" --layers 2 --embd 32 --heads 4 --kv-heads 2 --forward 5,80,200,17 6)
    run "$MFC" convert "$D/m" -o "$D/m.gguf" --outtype f32
    [ "$status" -eq 0 ]
    [[ "$output" == *"21 tensors, F32"* ]]
    got=$(greedy "$D/m.gguf" 5,80,200,17 6)
    echo "transformers $want / llama.cpp $got"
    [ "$got" = "$want" ]
}

@test "transformers' own checkpoints (tests/data/hf): greedy tokens, top 5, rope_freqs, vocab ids as recorded" {
    require_llama
    local exp="$FIXTURE/expected.json"
    for m in tiny-llama tiny-llama-bf16; do
        "$MFC" convert "$FIXTURE/$m" -o "$D/$m.gguf" --outtype f32
        python3 - "$exp" "$m" "$D/$m.gguf" "$LLAMA_REF" "$GG" "$FIXTURE/$m" <<'EOF'
import json, subprocess, sys
exp, m, gguf, ref, gg, src = sys.argv[1:]
d = json.load(open(exp))["models"][m]
for p in d["prompts"]:
    out = json.loads(subprocess.check_output(
        ["node", ref, "--model", gguf, "--tokens", ",".join(map(str, p["prompt_ids"])),
         "--n", "16", "--top", "5"]))
    assert out["generated"] == p["greedy"], (m, p["text"], out["generated"], p["greedy"])
    assert [t for t, _ in out["top"]] == p["top5"]["ids"], (m, p["text"])
    # log-softmax differences are logit differences (llama.cpp keeps K and V
    # in F16 by default: about 1e-3 apart)
    lp, lv = [v for _, v in out["top"]], p["top5"]["values"]
    for i in range(1, 5):
        assert abs((lp[0] - lp[i]) - (lv[0] - lv[i])) < 5e-3, (m, p["text"], i)
    print(m, p["text"][:24], "greedy and top 5 as transformers")
if "rope_freqs" in d:
    got = [float(x) for x in subprocess.check_output(
        ["python3", gg, "f32", gguf, "rope_freqs.weight"]).split()]
    assert len(got) == len(d["rope_freqs"]), got
    assert all(abs(a - b) <= 1e-6 * b for a, b in zip(got, d["rope_freqs"])), got
kv = subprocess.check_output(["python3", gg, "kv", gguf], text=True)
assert "tokenizer.ggml.pre string llama-bpe" in kv and "bos_token_id uint32 507" in kv, kv
assert "eos_token_id uint32 511" in kv and "add_bos_token bool True" in kv, kv
assert "tokenizer.chat_template string" in kv, kv
EOF
    done
    require_shared
    llama3_ids_match "$D/tiny-llama.gguf" "$FIXTURE/tiny-llama-vocab.out"
}

@test "mfc convert of a PEFT directory (--base): llama.cpp with base + adapter gives PEFT's greedy tokens" {
    require_llama
    [ -d "$MFC_SRCDIR/tests/data/peft/tiny-lora" ] || skip "tests/data/peft not found"
    "$MFC" convert "$FIXTURE/tiny-llama" -o "$D/base.gguf" --outtype f32
    run "$MFC" convert "$MFC_SRCDIR/tests/data/peft/tiny-lora" -o "$D/a.gguf"
    [ "$status" -eq 2 ]
    [[ "$output" == *"give its base model with --base"* ]]
    "$MFC" convert "$MFC_SRCDIR/tests/data/peft/tiny-lora" -o "$D/a.gguf" --base "$D/base.gguf"
    python3 - "$MFC_SRCDIR/tests/data/peft/expected.json" "$FIXTURE/expected.json" "$D" \
        "$LLAMA_REF" <<'EOF'
import json, subprocess, sys
peft, hf, d, ref = sys.argv[1:]
want = json.load(open(peft))["adapters"]["tiny-lora"]["prompts"]
prompts = json.load(open(hf))["models"]["tiny-llama"]["prompts"]
for p, w in zip(prompts, want):
    out = json.loads(subprocess.check_output(
        ["node", ref, "--model", d + "/base.gguf", "--lora", d + "/a.gguf", "--tokens",
         ",".join(map(str, p["prompt_ids"])), "--n", "16", "--top", "1"]))
    assert out["generated"] == w["greedy"], (p["text"], out["generated"], w["greedy"])
EOF
}

@test "Mistral class, MHA, tied embeddings, BF16 in 3 shards: auto keeps BF16, no output.weight, same tokens" {
    require_llama
    want=$(python3 "$MKDIR" "$D/m" --layers 3 --embd 32 --heads 2 --kv-heads 2 --dtype BF16 \
        --tied --shards 3 --seed 7 --arch MistralForCausalLM --forward 9,10,11 5)
    [ -f "$D/m/model.safetensors.index.json" ]
    "$MFC" convert "$D/m" -o "$D/m.gguf"
    run python3 "$GG" tensors "$D/m.gguf"
    [[ "$output" == *"token_embd.weight BF16 32,"* ]]
    [[ "$output" == *"blk.2.ffn_norm.weight F32 32"* ]]
    ! python3 "$GG" tensors "$D/m.gguf" | grep -q '^output.weight'
    python3 "$GG" tensors "$D/m.gguf" | grep -q '^output_norm.weight F32'

    python3 "$GG" kv "$D/m.gguf" | grep -qx 'general.file_type uint32 32'
    # BF16 weights, F32 arithmetic in both: the same greedy path
    got=$(greedy "$D/m.gguf" 9,10,11 5)
    echo "transformers $want / llama.cpp $got"
    [ "$got" = "$want" ]
}

@test "--outtype f16 from BF16 and F32 sources: every value is the nearest-even F16, rows where they belong" {
    for dt in BF16 F32; do
        rm -rf "$D/m"
        python3 "$MKDIR" "$D/m" --layers 1 --embd 64 --ff 96 --heads 4 --kv-heads 2 --dtype $dt
        "$MFC" convert "$D/m" -o "$D/m.gguf" --outtype f16
        PYTHONPATH="$MFC_SRCDIR/tests/cli" python3 - "$D/m/model.safetensors" "$D/m.gguf" $dt <<'EOF'
import json, struct, sys
import hf_gguf
st = open(sys.argv[1], "rb").read()
(hl,) = struct.unpack_from("<Q", st, 0)
hdr = json.loads(st[8:8 + hl])
data = open(sys.argv[2], "rb").read()
kvs, tensors, base = hf_gguf.parse(data)
off = {n: (t, o) for n, t, d, o in tensors}
def src(name):
    b, e = hdr[name]["data_offsets"]
    raw = st[8 + hl + b:8 + hl + e]
    if sys.argv[3] == "F32":
        return list(struct.unpack("<%df" % (len(raw) // 4), raw))
    return [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
def check(hf, gg, rows, perm_heads):
    vals = src(hf)
    t, o = off[gg]
    assert t == 1, (gg, t)
    cols = len(vals) // rows
    hd = rows // perm_heads if perm_heads else 0
    got = data[base + o:base + o + 2 * len(vals)]
    for r in range(rows):
        s = r if not hd else (r // hd) * hd + (r % 2) * (hd // 2) + (r % hd) // 2
        want = b"".join(struct.pack("<e", v) for v in vals[s * cols:(s + 1) * cols])
        assert got[2 * r * cols:2 * (r + 1) * cols] == want, (gg, r)
check("model.layers.0.mlp.up_proj.weight", "blk.0.ffn_up.weight", 96, 0)
check("model.layers.0.self_attn.q_proj.weight", "blk.0.attn_q.weight", 64, 4)
check("model.layers.0.self_attn.k_proj.weight", "blk.0.attn_k.weight", 32, 2)
check("model.embed_tokens.weight", "token_embd.weight", 306, 0)
EOF
    done
}

# The growth of peak RSS over converting a tiny checkpoint, so that what a
# process costs before it reads a byte of weights (libraries, and under
# ASan its runtime, shadow and quarantine: 37 MB for the tiny one on the
# build machine, against 14 MB without) is not counted as the model's.
@test "streaming: peak RSS stays far below the model size" {
    [ -x /usr/bin/time ] || { echo "GNU time is not installed (script/bootstrap installs it)"; false; }
    python3 "$MKDIR" "$D/m" --big --layers 4 --embd 512 --ff 2048 --heads 8 --kv-heads 2 \
        --vocab-size 32000 --dtype F16
    python3 "$MKDIR" "$D/s" --layers 2 --embd 32 --heads 4 --kv-heads 2 --dtype F16
    local size rss base
    size=$(stat -c %s "$D/m/model.safetensors")
    /usr/bin/time -f %M -o "$D/rss0" "$MFC" convert "$D/s" -o "$D/s.gguf" --outtype f32
    /usr/bin/time -f %M -o "$D/rss" "$MFC" convert "$D/m" -o "$D/m.gguf" --outtype f32
    base=$(($(cat "$D/rss0") * 1024))
    rss=$(($(cat "$D/rss") * 1024))
    echo "model $size bytes (F32 out: $(stat -c %s "$D/m.gguf")), peak RSS $rss bytes," \
        "$base for a tiny checkpoint"
    [ "$size" -gt 90000000 ]
    [ $((rss - base)) -lt $((size / 2)) ]
}

@test "metadata keys, order and types are convert_hf_to_gguf.py's" {
    python3 "$MKDIR" "$D/m" --layers 2 --embd 32 --heads 4 --kv-heads 2 --dtype F16 --pre gpt2
    "$MFC" convert "$D/m" -o "$D/m.gguf" --name tiny
    python3 "$GG" kv "$D/m.gguf" | cut -d' ' -f1-2 >"$D/kv"
    cat >"$D/want" <<'EOF'
general.architecture string
general.type string
general.name string
llama.block_count uint32
llama.context_length uint32
llama.embedding_length uint32
llama.feed_forward_length uint32
llama.attention.head_count uint32
llama.attention.head_count_kv uint32
llama.rope.freq_base float32
llama.attention.layer_norm_rms_epsilon float32
general.file_type uint32
llama.vocab_size uint32
llama.rope.dimension_count uint32
tokenizer.ggml.model string
tokenizer.ggml.pre string
tokenizer.ggml.tokens array[string]
tokenizer.ggml.token_type array[int32]
tokenizer.ggml.merges array[string]
tokenizer.ggml.bos_token_id uint32
tokenizer.ggml.eos_token_id uint32
tokenizer.ggml.eot_token_id uint32
tokenizer.ggml.add_bos_token bool
tokenizer.chat_template string
general.quantization_version uint32
EOF
    diff "$D/want" "$D/kv"
    run python3 "$GG" kv "$D/m.gguf"
    [[ "$output" == *"general.name string tiny"* ]]
    [[ "$output" == *"tokenizer.ggml.pre string gpt-2"* ]]
    [[ "$output" == *"general.file_type uint32 1"* ]]
    [[ "$output" == *"llama.rope.freq_base float32 500000"* ]]
    [[ "$output" == *"llama.rope.dimension_count uint32 8"* ]]
    [[ "$output" == *"tokenizer.ggml.eos_token_id uint32 305"* ]]
}

@test "Llama 3 vocabulary: llama.cpp and mfc's runtime encode the test strings to HF's ids" {
    require_shared
    require_llama
    [ -f "$VOCAB/llama3-tokenizer.json" ] || skip "llama3-tokenizer.json not found"
    python3 "$MKDIR" "$D/m" --vocab llama3 --llama3-json "$VOCAB/llama3-tokenizer.json" \
        --layers 1 --embd 16 --ff 32 --heads 2 --kv-heads 1 --dtype BF16 --tied
    "$MFC" convert "$D/m" -o "$D/m.gguf"
    llama3_ids_match "$D/m.gguf" "$VOCAB/ggml-vocab-llama-bpe.gguf.out"
}

@test "Llama 2 (SentencePiece BPE, byte fallback) vocabulary: ids as HF's, types as sentencepiece's" {
    require_shared
    require_llama
    local spm="$VOCAB/ggml-vocab-llama-spm.gguf"
    [ -f "$spm" ] || skip "$spm not found"
    python3 "$MKDIR" "$D/m" --vocab spm --spm-gguf "$spm" --layers 1 --embd 16 --ff 32 \
        --heads 2 --kv-heads 1 --dtype F16 --tied
    "$MFC" convert "$D/m" -o "$D/m.gguf"
    tokenize_both "$spm.inp" "$D/m.gguf"
    PYTHONPATH="$MFC_SRCDIR/tests/cli" python3 - "$spm" "$D/m.gguf" "$spm.out" "$D/llama.json" \
        "$D/mfc.json" <<'EOF'
import json, sys
import hf_gguf
kv = [{k: v for k, t, v in hf_gguf.parse(open(f, "rb").read())[0]} for f in sys.argv[1:3]]
for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type"):
    assert kv[0][key] == kv[1][key], key
for key in ("bos_token_id", "eos_token_id", "unknown_token_id"):
    assert kv[1]["tokenizer.ggml." + key] == kv[0]["tokenizer.ggml." + key], key
want = [[int(x) for x in l.split()] for l in open(sys.argv[3]).read().split("\n")[:46]]
for f in sys.argv[4:]:
    got = json.load(open(f))
    bad = [i for i in range(len(want)) if want[i] != got[i]]
    print(f, len(want) - len(bad), "of", len(want))
    assert len(got) == 46 and not bad, bad[:5]
EOF
}

@test "Llama 3.x rope_scaling: rope_freqs.weight holds the converter's factors" {
    python3 "$MKDIR" "$D/m" --layers 1 --embd 64 --heads 2 --kv-heads 2 --rope-llama3
    "$MFC" convert "$D/m" -o "$D/m.gguf"
    python3 "$GG" f32 "$D/m.gguf" rope_freqs.weight >"$D/got"
    python3 - "$D/got" <<'EOF'
import math, sys
got = [float(x) for x in open(sys.argv[1])]
dim, base, factor, lo, hi, old = 32, 500000.0, 32.0, 1.0, 4.0, 8192
want = []
for i in range(0, dim, 2):
    freq = 1.0 / base ** (i / dim)
    wl = 2 * math.pi / freq
    if wl < old / hi:
        want.append(1.0)
    elif wl > old / lo:
        want.append(factor)
    else:
        s = (old / wl - lo) / (hi - lo)
        want.append(1 / ((1 - s) / factor + s))
assert len(got) == 16, got
assert 1.0 in got and factor in got and any(1 < g < factor for g in got), got
for g, w in zip(got, want):
    assert abs(g - w) <= 1e-5 * w, (g, w)
EOF
}

@test "--quantize Q8_0 and Q4_K_M write llama.cpp's file types and load in llama.cpp" {
    require_llama
    python3 "$MKDIR" "$D/m" --layers 2 --embd 256 --ff 512 --heads 4 --kv-heads 2 --dtype F16
    "$MFC" convert "$D/m" -o "$D/q8.gguf" --quantize Q8_0
    python3 "$GG" kv "$D/q8.gguf" | grep -qx 'general.file_type uint32 7'
    python3 "$GG" tensors "$D/q8.gguf" | grep -q 'blk.0.attn_q.weight Q8_0 256,256'
    "$MFC" convert "$D/m" -o "$D/q4.gguf" --quantize q4_k_m
    python3 "$GG" kv "$D/q4.gguf" | grep -qx 'general.file_type uint32 15'
    python3 "$GG" tensors "$D/q4.gguf" | grep -q 'blk.0.attn_q.weight Q4_K 256,256'
    python3 "$GG" tensors "$D/q4.gguf" | grep -q 'output.weight Q6_K'
    python3 "$GG" tensors "$D/q4.gguf" | grep -q 'blk.0.attn_norm.weight F32'
    greedy "$D/q8.gguf" 1,2,3 3
    greedy "$D/q4.gguf" 1,2,3 3
}

@test "malformed directories fail with a sentence naming the problem, and write nothing" {
    check() { # BREAK EXPECTED-TEXT [extra hf_mkdir args]
        local b=$1 want=$2
        shift 2
        rm -rf "$D/b"
        python3 "$MKDIR" "$D/b" --break "$b" "$@"
        run "$MFC" convert "$D/b" -o "$D/b.gguf"
        echo "$b: $output"
        [ "$status" -eq 1 ]
        [[ "$output" == *"$want"* ]]
        [ ! -e "$D/b.gguf" ]
    }
    check truncate "model.safetensors"
    check offset "model.safetensors"
    check dtype "dtype F8_E4M3; mfc converts F32, F16 and BF16"
    check no-tokenizer "no tokenizer.json"
    check shape "tensor model.layers.0.self_attn.q_proj.weight has shape [34, 32], but config.json implies [32, 32]"
    check layer "beyond num_hidden_layers 2"
    check extra "tensor model.vision_tower.weight is not part of a LlamaForCausalLM"
    check truncate "model-00001-of-00002.safetensors" --shards 2
    rm -rf "$D/b"
    python3 "$MKDIR" "$D/b" --arch FalconForCausalLM
    run "$MFC" convert "$D/b" -o "$D/b.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"architecture FalconForCausalLM is not supported"* ]]
    run "$MFC" convert "$D/nothing" -o "$D/b.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"not a directory"* ]]
    mkdir "$D/empty"
    run "$MFC" convert "$D/empty" -o "$D/b.gguf"
    [[ "$output" == *"no config.json"* ]]
}

@test "usage errors exit 2" {
    run "$MFC" convert
    [ "$status" -eq 2 ]
    run "$MFC" convert "$D" --outtype f8 -o x
    [ "$status" -eq 2 ]
    [[ "$output" == *"--outtype must be"* ]]
    run "$MFC" convert "$D"
    [ "$status" -eq 2 ]
    [[ "$output" == *"-o OUT.gguf is required"* ]]
    run "$MFC" convert "$D" -o x --quantize Q9
    [ "$status" -eq 2 ]
}

@test "FROM ./dir builds an image; a rebuild is CACHED; an edited file converts again" {
    mkdir "$D/ctx"
    python3 "$MKDIR" "$D/ctx/model" --dtype F16
    printf 'FROM ./model\nSYSTEM hi\n' >"$D/ctx/Modelfile"
    run "$MFC" build -t hfdir --progress=plain "$D/ctx"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"#1 convert FROM ./model DONE"* ]]
    run "$MFC" build -t hfdir --progress=plain "$D/ctx"
    [ "$status" -eq 0 ]
    [[ "$output" == *"#1 convert FROM ./model CACHED"* ]]
    run "$MFC" inspect hfdir
    echo "$output"
    [[ "$output" == *llama* ]]
    sed -i 's/"rms_norm_eps": 1e-05/"rms_norm_eps": 1e-06/' "$D/ctx/model/config.json"
    run "$MFC" build -t hfdir --progress=plain "$D/ctx"
    [ "$status" -eq 0 ]
    [[ "$output" == *"#1 convert FROM ./model DONE"* ]]
    rm "$D/ctx/model/tokenizer.json"
    run "$MFC" build -t hfdir --progress=plain "$D/ctx"
    [ "$status" -eq 1 ]
    [[ "$output" == *"no tokenizer.json"* ]]
}


@test "FROM a directory as transformers 5 writes it: model_max_length 1e30, chat_template.jinja, generation_config.json, added_tokens_decoder, dtype, shards with index" {
    mkdir "$D/ctx"
    python3 "$MKDIR" "$D/ctx/model" --dtype BF16 --shards 2
    python3 - "$D/ctx/model" <<'PY'
import json, os, sys
d = sys.argv[1]
tc = json.load(open(os.path.join(d, "tokenizer_config.json")))
tmpl = tc.pop("chat_template")          # transformers 5 saves it beside, as a file
open(os.path.join(d, "chat_template.jinja"), "w").write(tmpl)
tc["model_max_length"] = int(1e30)      # 1000000000000000019884624838656
tc["added_tokens_decoder"] = {"%d" % t["id"]: {k: v for k, v in t.items() if k != "id"}
                              for t in json.load(open(os.path.join(d, "tokenizer.json")))["added_tokens"]}
tc["tokenizer_class"] = "TokenizersBackend"
json.dump(tc, open(os.path.join(d, "tokenizer_config.json"), "w"), indent=2)
cfg = json.load(open(os.path.join(d, "config.json")))
cfg["dtype"] = cfg.pop("torch_dtype")   # transformers 5 renamed it
cfg["transformers_version"] = "5.0.0"
json.dump(cfg, open(os.path.join(d, "config.json"), "w"), indent=2)
json.dump({"bos_token_id": cfg["bos_token_id"], "eos_token_id": [cfg["eos_token_id"]],
           "do_sample": True, "temperature": 0.6, "top_p": 0.9, "transformers_version": "5.0.0"},
          open(os.path.join(d, "generation_config.json"), "w"), indent=2)
PY
    grep -q '"model_max_length": 1000000000000000019884624838656' "$D/ctx/model/tokenizer_config.json"
    [ -f "$D/ctx/model/model.safetensors.index.json" ]
    printf 'FROM ./model\n' >"$D/ctx/Modelfile"
    run "$MFC" build -t hf5 --progress=plain "$D/ctx"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"#1 convert FROM ./model DONE"* ]]
    run "$MFC" inspect hf5
    [[ "$output" == *llama* ]]
    # the chat template came from chat_template.jinja
    "$MFC" save hf5 -o "type=oci,dest=$D/oci"
    w=$(jq -r '.layers[] | select(.annotations."org.cncf.model.filepath"=="/models/model.gguf") | .digest' \
        "$D/oci/blobs/sha256/$(jq -r '.manifests[0].digest' "$D/oci/index.json" | cut -d: -f2)" | cut -d: -f2)
    tar -xOf "$D/oci/blobs/sha256/$w" models/model.gguf >"$D/m.gguf"
    "$MFC" inspect --json "$D/m.gguf" >"$D/m.json"
    jq -e --argjson n "$(wc -c <"$D/ctx/model/chat_template.jinja")" \
        '.chat_template.present and .chat_template.length == $n' "$D/m.json"
}

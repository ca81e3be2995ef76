#!/usr/bin/env bats
# gguf.bats: GGUF files end to end: mkmodel writes models (the same bytes on
# any number of threads) and LoRA adapters that llama.cpp (node-llama-cpp, tests/tools/llama-ref.mjs) loads and runs,
# and `mfc inspect` reports what an independent Python header reader finds
# in llama.cpp's own vocab GGUFs.

load helpers

MKMODEL="${MFC_BUILDDIR:-$BATS_TEST_DIRNAME/../..}/tests/tools/mkmodel"
LLAMA_REF="$MFC_SRCDIR/tests/tools/llama-ref.mjs"
VOCAB="$MFC_SHARED/data/vocab"

# mkmodel with the toy shape into $BATS_FILE_TMPDIR/NAME.gguf.
mk() {
    local name=$1
    shift
    "$MKMODEL" -o "$BATS_FILE_TMPDIR/$name.gguf" "$@"
}

# llama_generates N N_VOCAB ARGS...: runs llama.cpp on a model (and
# adapters), checks that it generated N tokens over a vocabulary of N_VOCAB
# (0: any) and leaves "n_vocab [generated] [top]" in $output.
llama_generates() {
    local n=$1 vocab=$2
    shift 2
    run node "$LLAMA_REF" --n "$n" --top 3 --prompt "The quick brown fox" "$@"
    [ "$status" -eq 0 ] || { echo "$output"; return 1; }
    output=$(echo "$output" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read().strip().splitlines()[-1])
n, vocab = int(sys.argv[1]), int(sys.argv[2])
assert len(r["generated"]) == n, r
assert vocab == 0 or r["n_vocab"] == vocab, r["n_vocab"]
assert len(r["top"]) == 3 and all(lp <= 0 for _, lp in r["top"]), r
assert len(r["prompt_tokens"]) > 1, r
print(r["n_vocab"], r["generated"], r["top"])' "$n" "$vocab")
}

@test "mkmodel writes every file type and mfc inspect reads them back" {
    for t in f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m q5_k_m; do
        mk "toy-$t" --type "$t"
        run "$MFC" inspect --json "$BATS_FILE_TMPDIR/toy-$t.gguf"
        [ "$status" -eq 0 ]
        echo "$output" | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["architecture"] == "llama" and s["block_count"] == 2, s
# per layer: q, o 256x256; k, v 256x128; gate, up, down 256x512; 2 norms
layer = 2 * 65536 + 2 * 32768 + 3 * 131072 + 2 * 256
assert s["parameters"] == 2 * layer + 2 * 512 * 256 + 256, s["parameters"]
assert s["tensor_count"] == 21 and s["vocab_size"] == 512
print(sys.argv[1], s["file_type"], s["tensor_types"])' "$t"
    done
    run "$MFC" inspect --json "$BATS_FILE_TMPDIR/toy-q4_k_m.gguf"
    [[ "$output" == *'"name": "Q4_K_M"'* ]]
    [[ "$output" == *'"Q6_K"'* ]]
}

@test "mkmodel --threads N writes the file one thread writes, byte for byte" {
    for t in f16 q4_k_m; do
        mk "one-$t" --type "$t" --seed 9
        for n in 2 5; do
            mk "threads$n-$t" --type "$t" --seed 9 --threads "$n"
            cmp "$BATS_FILE_TMPDIR/one-$t.gguf" "$BATS_FILE_TMPDIR/threads$n-$t.gguf"
        done
    done
    run "$MKMODEL" -o "$BATS_FILE_TMPDIR/x.gguf" --threads 0
    [ "$status" -eq 2 ]
    [[ "$output" == *"--threads wants a positive integer, not '0'"* ]]
}

@test "llama.cpp runs mkmodel models with the llama-spm vocabulary (f32, f16, q8_0, q4_k_m)" {
    require_shared
    require_llama
    for t in f32 f16 q8_0 q4_k_m; do
        mk "spm-$t" --type "$t" --vocab-from "$VOCAB/ggml-vocab-llama-spm.gguf"
        llama_generates 6 32000 --model "$BATS_FILE_TMPDIR/spm-$t.gguf"
    done
}

@test "llama.cpp runs mkmodel models with the llama3 vocabulary (f32, f16, q8_0, q4_k_m)" {
    require_shared
    require_llama
    # a 128256-row embedding dominates: 64 wide except for q4_k_m, whose
    # K-quant rows need 256 (narrower rows fall back to other types)
    for t in f32 f16 q8_0 q4_k_m; do
        local narrow=(--embd 64 --ff 128 --heads 2 --kv-heads 1)
        [ "$t" = q4_k_m ] && narrow=()
        mk "l3-$t" --type "$t" --tied --vocab-json "$VOCAB/llama3-tokenizer.json" "${narrow[@]}"
        llama_generates 6 128256 --model "$BATS_FILE_TMPDIR/l3-$t.gguf"
    done
    run "$MFC" inspect "$BATS_FILE_TMPDIR/l3-q4_k_m.gguf"
    [[ "$output" == *"gpt2 (pre llama-bpe), 128256 tokens, 280147 merges"* ]]
    [[ "$output" == *"128000 / 128009"* ]]
}

@test "llama.cpp applies an mkmodel LoRA adapter and its output changes" {
    require_llama
    mk base --type f16
    mk lora --lora 8 --targets q,k,v,o,gate,up,down --lora-alpha 16
    llama_generates 4 512 --model "$BATS_FILE_TMPDIR/base.gguf"
    local plain=$output
    llama_generates 4 512 --model "$BATS_FILE_TMPDIR/base.gguf" --lora "$BATS_FILE_TMPDIR/lora.gguf"
    [ "$output" != "$plain" ] # the logprobs (at least) move
}

@test "llama.cpp refuses a LoRA adapter made for another shape" {
    require_llama
    mk base2 --type f32
    mk wrong --lora 4 --targets q --embd 128 --heads 4
    run node "$LLAMA_REF" --model "$BATS_FILE_TMPDIR/base2.gguf" --lora "$BATS_FILE_TMPDIR/wrong.gguf" --n 1
    [ "$status" -eq 1 ]
    [[ "$output" == *"incorrect shape"* || "$output" == *"LoRA"* ]]
}

@test "mkmodel builds a gpt2 vocabulary from an HF tokenizer.json" {
    cat >"$BATS_FILE_TMPDIR/tokenizer.json" <<'JSON'
{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "\u0120": 3, "\u0120ab": 4},
           "merges": ["a b", ["\u0120", "ab"]]},
 "added_tokens": [{"id": 6, "content": "<|begin_of_text|>", "special": true},
                  {"id": 7, "content": "<|end_of_text|>", "special": true},
                  {"id": 8, "content": "<tool>", "special": false}]}
JSON
    mk hf --vocab-json "$BATS_FILE_TMPDIR/tokenizer.json" --layers 1
    run "$MFC" inspect --json "$BATS_FILE_TMPDIR/hf.gguf"
    [ "$status" -eq 0 ]
    echo "$output" | python3 -c '
import json, sys
t = json.load(sys.stdin)["tokenizer"]
assert (t["model"], t["pre"], t["tokens"], t["merges"]) == ("gpt2", "llama-bpe", 9, 2), t
assert (t["bos_token_id"], t["eos_token_id"], t["add_bos_token"]) == (6, 7, True), t'
    python3 - "$BATS_FILE_TMPDIR/hf.gguf" <<'PY'
import struct, sys
d = open(sys.argv[1], "rb").read()
i = d.index(b"tokenizer.ggml.token_type") + len(b"tokenizer.ggml.token_type") + 4 + 4 + 8
assert list(struct.unpack_from("<9i", d, i)) == [1, 1, 1, 1, 1, 5, 3, 3, 4]
assert b"<unused_5>" in d and b"\x04\x00\x00\x00\x00\x00\x00\x00\xc4\xa0ab" in d
PY
}

@test "mfc inspect shows LoRA adapter metadata" {
    mk adapter --lora 8 --targets q,v --lora-alpha 16 --layers 3
    run "$MFC" inspect "$BATS_FILE_TMPDIR/adapter.gguf"
    [ "$status" -eq 0 ]
    [[ "$output" == *"type             adapter"* ]]
    [[ "$output" == *"adapter          lora, alpha 16, rank 8, 6 tensor pairs"* ]]
    [[ "$output" == *"blk.2.attn_v.weight"* ]]
    run "$MFC" inspect --json --tensors "$BATS_FILE_TMPDIR/adapter.gguf"
    echo "$output" | python3 -c '
import json, sys
s = json.load(sys.stdin)
a = s["adapter"]
assert a["type"] == "lora" and a["alpha"] == 16 and a["rank"] == 8 and a["pairs"] == 6, a
assert a["targets"][0] == "blk.0.attn_q.weight" and not a["unpaired"], a
t = {x["name"]: x for x in s["tensors"]}
assert t["blk.0.attn_q.weight.lora_a"]["shape"] == [256, 8]
assert t["blk.0.attn_v.weight.lora_b"]["shape"] == [8, 128]'
}

@test "mfc inspect --tensors lists name, type, shape, bytes and offset" {
    mk tbl --type q8_0 --rope-freqs
    run "$MFC" inspect --tensors "$BATS_FILE_TMPDIR/tbl.gguf"
    [ "$status" -eq 0 ]
    [[ "$output" == *"rope_freqs tensor: yes"* ]]
    echo "$output" | grep -E '^blk\.1\.ffn_down\.weight +Q8_0 +512 x 256 +139264 +[0-9]+$'
    echo "$output" | grep -E '^token_embd\.weight +Q8_0 +256 x 512 +139264 +0$'
}

@test "mfc inspect reads every llama.cpp vocab GGUF like an independent reader" {
    require_shared
    local n=0
    for f in "$VOCAB"/*.gguf; do
        run "$MFC" inspect --json "$f"
        [ "$status" -eq 0 ] || { echo "$f: $output"; return 1; }
        echo "$output" | python3 "$BATS_TEST_DIRNAME/gguf_header.py" "$f"
        n=$((n + 1))
    done
    [ "$n" -ge 5 ]
}

@test "mfc inspect prints the human summary of a vocab GGUF" {
    require_shared
    run "$MFC" inspect "$VOCAB/ggml-vocab-phi-3.gguf"
    [ "$status" -eq 0 ]
    [[ "$output" == *"architecture     phi3"* ]]
    [[ "$output" == *"tokenizer        llama (pre default), 32064 tokens, - merges"* ]]
    [[ "$output" == *"chat template    yes ("*" bytes)"* ]]
    [[ "$output" == *"file type        F16 (1)"* ]]
}

@test "mfc inspect names the problem in a damaged file and exits 1" {
    mk dmg --type f16
    head -c 100000 "$BATS_FILE_TMPDIR/dmg.gguf" >"$BATS_FILE_TMPDIR/cut.gguf"
    run "$MFC" inspect "$BATS_FILE_TMPDIR/cut.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"cut.gguf: byte "*": tensor '"*"' data (offset "*") runs past the end of the file (size 100000)"* ]]
    printf 'GGUF\001\000\000\000' >"$BATS_FILE_TMPDIR/v1.gguf"
    head -c 100 /dev/zero >>"$BATS_FILE_TMPDIR/v1.gguf"
    run "$MFC" inspect "$BATS_FILE_TMPDIR/v1.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"GGUF version 1 is no longer supported"* ]]
    run "$MFC" inspect "$BATS_FILE_TMPDIR/nope.gguf"
    [ "$status" -eq 1 ]
}

@test "mfc inspect usage errors exit 2" {
    run "$MFC" inspect
    [ "$status" -eq 2 ]
    run "$MFC" inspect --bogus x.gguf
    [ "$status" -eq 2 ]
    run "$MFC" help inspect
    [ "$status" -eq 0 ]
    [[ "$output" == *"--tensors"* ]]
}

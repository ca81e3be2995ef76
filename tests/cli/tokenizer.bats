#!/usr/bin/env bats
# tokenizer.bats: runtime/tokenizer against llama.cpp itself (node-llama-cpp,
# tests/tools/llama-tok.mjs) on seeded random strings that mix scripts,
# digits, punctuation, contractions, ASCII and Unicode whitespace, emoji and
# special-token spellings: every vocabulary GGUF in $MFC_SHARED/data/vocab
# plus Llama 3 (built by mkmodel), with and without parse_special. The ids
# must be identical for every string (tests/tools/toktool prints the same
# JSON as llama-tok.mjs, so the outputs are compared byte for byte).
# Pre-tokenizers without a vocabulary of their own are checked on gpt-2's
# vocabulary with tokenizer.ggml.pre rewritten; Qwen's and Gemma's on
# real-size vocabularies shaped as theirs, through mfc convert.

load helpers

TOKTOOL="${MFC_BUILDDIR:-$BATS_TEST_DIRNAME/../..}/tests/tools/toktool"
MKMODEL="${MFC_BUILDDIR:-$BATS_TEST_DIRNAME/../..}/tests/tools/mkmodel"
LLAMA_TOK="$MFC_SRCDIR/tests/tools/llama-tok.mjs"
GGUF_VOCAB="$MFC_SRCDIR/tests/tools/gguf_vocab.py"
VOCAB="$MFC_SHARED/data/vocab"
COUNT=400 # strings per vocabulary; about 1 s of llama.cpp time each

setup_file() {
    if command -v node >/dev/null; then
        node "$LLAMA_TOK" gen --seed 20260 --count "$COUNT" >"$BATS_FILE_TMPDIR/strings.json"
    fi
}

# same_ids GGUF [STRINGS]: llama.cpp and toktool agree on every string (of
# the random ones, or of the JSON file STRINGS), with and without
# parse_special (--both: one line each).
same_ids() {
    local gguf=$1 strings=${2:-$BATS_FILE_TMPDIR/strings.json}
    local ref="$BATS_FILE_TMPDIR/ref.json" mine="$BATS_FILE_TMPDIR/mine.json"
    node "$LLAMA_TOK" ids --model "$gguf" --in "$strings" --both >"$ref" \
        2>"$BATS_FILE_TMPDIR/ref.err" || { cat "$BATS_FILE_TMPDIR/ref.err"; return 1; }
    "$TOKTOOL" ids "$gguf" "$strings" --both >"$mine"
    cmp -s "$ref" "$mine" && return 0
    python3 - "$strings" "$ref" "$mine" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
ref, mine = ([json.loads(l) for l in open(f)] for f in sys.argv[2:])
for special, (a, b) in enumerate(zip(ref, mine)):
    bad = [i for i in range(len(a)) if a[i] != b[i]]
    print(f"parse_special={special}: {len(bad)} of {len(a)} strings differ")
    for i in bad[:5]:
        print(repr(s[i]), "\n  llama.cpp", a[i], "\n  mfc      ", b[i])
EOF
    return 1
}

check_vocab() {
    require_shared
    require_llama
    local gguf="$VOCAB/ggml-vocab-$1.gguf"
    [ -f "$gguf" ] || skip "$gguf not found"
    same_ids "$gguf"
}

@test "llama-spm ids are llama.cpp's on random text" { check_vocab llama-spm; }
@test "phi-3 ids are llama.cpp's on random text" { check_vocab phi-3; }
@test "gpt-2 ids are llama.cpp's on random text" { check_vocab gpt-2; }
@test "deepseek-llm ids are llama.cpp's on random text" { check_vocab deepseek-llm; }
@test "deepseek-coder ids are llama.cpp's on random text" { check_vocab deepseek-coder; }
@test "falcon ids are llama.cpp's on random text" { check_vocab falcon; }
@test "starcoder ids are llama.cpp's on random text" { check_vocab starcoder; }
@test "mpt ids are llama.cpp's on random text" { check_vocab mpt; }
@test "refact ids are llama.cpp's on random text" { check_vocab refact; }

@test "llama-bpe (Llama 3, through mkmodel) ids are llama.cpp's on random text" {
    require_shared
    require_llama
    [ -f "$VOCAB/llama3-tokenizer.json" ] || skip "llama3-tokenizer.json not found"
    "$MKMODEL" -o "$BATS_FILE_TMPDIR/llama3.gguf" --vocab-json "$VOCAB/llama3-tokenizer.json" \
        --layers 1 --embd 32 --ff 32 --heads 1 --kv-heads 1 --type f16 --tied
    same_ids "$BATS_FILE_TMPDIR/llama3.gguf"
}

# with_pre SRC.gguf DST.gguf PRE: a copy of a vocabulary GGUF (no tensors)
# whose tokenizer.ggml.pre is PRE.
with_pre() {
    python3 - "$@" <<'EOF'
import struct, sys
src, dst, pre = sys.argv[1:4]
d = open(src, "rb").read()
magic, ver, nt, nk = struct.unpack_from("<IIQQ", d, 0)
assert nt == 0, "a vocabulary-only GGUF is expected"
o, out = 24, []
size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def skip(t):
    global o
    if t == 8:
        o += 8 + struct.unpack_from("<Q", d, o)[0]
    elif t == 9:
        et, n = struct.unpack_from("<IQ", d, o)
        o += 12
        for _ in range(n):
            skip(et)
    else:
        o += size[t]
for _ in range(nk):
    start = o
    kl = struct.unpack_from("<Q", d, o)[0]
    key = d[o + 8:o + 8 + kl].decode()
    o += 8 + kl
    t = struct.unpack_from("<I", d, o)[0]
    o += 4
    skip(t)
    if key == "tokenizer.ggml.pre":
        p = pre.encode()
        out.append(struct.pack("<Q", kl) + key.encode() + struct.pack("<IQ", 8, len(p)) + p)
    else:
        out.append(d[start:o])
body = struct.pack("<IIQQ", magic, ver, nt, nk) + b"".join(out)
open(dst, "wb").write(body + b"\0" * (-len(body) % 32))
EOF
}

@test "pre-tokenizers without a test vocabulary match llama.cpp (on gpt-2's vocabulary)" {
    require_shared
    require_llama
    [ -f "$VOCAB/ggml-vocab-gpt-2.gguf" ] || skip "ggml-vocab-gpt-2.gguf not found"
    for pre in default qwen2 chatglm-bpe dbrx bloom viking gpt-4o; do
        with_pre "$VOCAB/ggml-vocab-gpt-2.gguf" "$BATS_FILE_TMPDIR/pre.gguf" "$pre"
        same_ids "$BATS_FILE_TMPDIR/pre.gguf" || { echo "pre-tokenizer $pre"; return 1; }
    done
}

# Real Qwen and Gemma tokenizer.json files are not in ../shared; these are
# real-size vocabularies shaped as theirs and converted by mfc convert, so the
# GGUF's tokenizer keys are the converter's: Llama 3's 128k byte-level BPE
# with Qwen2's split (tokenizer.ggml.pre qwen2), Llama 2's SentencePiece
# vocabulary without the dummy prefix, as Gemma's (add_space_prefix false).
@test "qwen2 (128k BPE, Qwen2 split) and gemma (SPM, no dummy prefix) vocabularies from mfc convert match llama.cpp" {
    require_shared
    require_llama
    [ -f "$VOCAB/llama3-tokenizer.json" ] && [ -f "$VOCAB/ggml-vocab-llama-spm.gguf" ] ||
        skip "llama3-tokenizer.json or ggml-vocab-llama-spm.gguf not found"
    local mk="$MFC_SRCDIR/tests/cli/hf_mkdir.py" d="$BATS_FILE_TMPDIR" small
    small=(--layers 1 --embd 8 --ff 8 --heads 1 --kv-heads 1)
    python3 "$mk" "$d/qwen" --family qwen2 --llama3-json "$VOCAB/llama3-tokenizer.json" "${small[@]}"
    python3 "$mk" "$d/gemma" --family gemma2 --spm-gguf "$VOCAB/ggml-vocab-llama-spm.gguf" "${small[@]}"
    "$MFC" convert "$d/qwen" -o "$d/qwen.gguf" --outtype f16 >/dev/null
    "$MFC" convert "$d/gemma" -o "$d/gemma.gguf" --outtype f16 >/dev/null
    python3 "$MFC_SRCDIR/tests/cli/hf_gguf.py" kv "$d/qwen.gguf" | grep -qx "tokenizer.ggml.pre string qwen2"
    python3 "$MFC_SRCDIR/tests/cli/hf_gguf.py" kv "$d/gemma.gguf" |
        grep -qx "tokenizer.ggml.add_space_prefix bool False"
    same_ids "$d/qwen.gguf"
    same_ids "$d/gemma.gguf"
}

# o200k's split (gpt-4o, gpt-oss): a word ends where ASCII lower case turns
# to upper ("helloWorld"), a non-ASCII letter counts as either case, and a
# contraction stays on its word. The random strings above rarely tell this
# from Llama 3's split, so these mix such words (Latin, Greek, Cyrillic,
# titlecase digraphs, ligatures, CJK) with contractions of both cases and
# the "/" that may precede a newline.
@test "gpt-4o (o200k: gpt-oss) splits case runs and keeps contractions as llama.cpp does" {
    require_shared
    require_llama
    [ -f "$VOCAB/ggml-vocab-gpt-2.gguf" ] || skip "ggml-vocab-gpt-2.gguf not found"
    local words="$BATS_FILE_TMPDIR/case.json" a="$BATS_FILE_TMPDIR/a.json" b="$BATS_FILE_TMPDIR/b.json"
    python3 - "$words" <<'EOF'
import json, random, sys
r = random.Random(38)
parts = ["helloWorld", "HTTPServer", "iPhone", "McDonald's", "DON'T", "don'tStop", "ÉcoleNormale",
         "ΑθήναΣπάρτη", "ПриветМир", "straßeGROSS", "ǅemalǈubljana", "ABCdefGHI", "x/\n",
         "a//\r\n", " !!/\n\n", "12345", "³⁴five", "日本語Text", "ﬁLe", "'S", "'ll", " 've",
         "ǲwon't", "née'D", "eBay's", "WiFi", "ÀÉÎõüÑ", "ǆungla", "ʼapostrophe", "xÅy"]
seps = ["", " ", "  ", "\n", "\t", "-", "_", ".", "'", "/"]
out = ["".join(r.choice(parts) + r.choice(seps) for _ in range(r.randint(1, 6)))
       for _ in range(300)]
json.dump(out, open(sys.argv[1], "w"), ensure_ascii=False)
EOF
    # gpt-2's merges with tokens across the case changes above: one that
    # llama.cpp splits ("oW") and ones it keeps whole, since a non-ASCII
    # letter is of either case to it ("тМ", "αΣ", "xÅ", "üÑ", "lǈ")
    local join=()
    for p in oW тМ αΣ xÅ üÑ lǈ; do join+=(--join "$p"); done
    python3 "$GGUF_VOCAB" "$VOCAB/ggml-vocab-gpt-2.gguf" "$BATS_FILE_TMPDIR/o200k.gguf" \
        --pre gpt-4o "${join[@]}"
    same_ids "$BATS_FILE_TMPDIR/o200k.gguf" "$words"
    # the strings do tell o200k's split from Llama 3's
    python3 "$GGUF_VOCAB" "$VOCAB/ggml-vocab-gpt-2.gguf" "$BATS_FILE_TMPDIR/l3.gguf" \
        --pre llama-bpe "${join[@]}"
    "$TOKTOOL" ids "$BATS_FILE_TMPDIR/o200k.gguf" "$words" >"$a"
    "$TOKTOOL" ids "$BATS_FILE_TMPDIR/l3.gguf" "$words" >"$b"
    ! cmp -s "$a" "$b"
}

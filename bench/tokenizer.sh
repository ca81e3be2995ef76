#!/bin/bash
# tokenizer.sh: encode throughput of runtime/tokenizer (tests/tools/toktool)
# against llama.cpp's tokenizer (node-llama-cpp, tests/tools/llama-tok.mjs)
# on the same vocabulary GGUFs and texts, in MB of UTF-8 per CPU second
# (the build machines are shared, so wall time would time the neighbours).
#
# usage: bench/tokenizer.sh [SECONDS]      (run by `make bench-tokenizer`)
# Texts: "prose" is every *.md file under tests/tools/node/node_modules,
# sorted and concatenated (English prose, markdown, code; ~780 kB);
# "mixed" is llama.cpp's tokenizer test strings (scripts, emoji, runs of
# whitespace, digits) repeated to ~500 kB (so very repetitive); "prose/2k"
# is the prose encoded as separate texts of about 2 kB, like a stream of
# prompts (below 4 kB mfc keeps no per-call memo). Vocabularies: llama-bpe (Llama 3,
# built by mkmodel from llama3-tokenizer.json), llama-spm and gpt-2 from
# $MFC_SHARED/data/vocab. Both sides tokenize without BOS/EOS and without
# parsing special tokens; llama.cpp's figure includes node-llama-cpp's
# string marshalling, a few percent of its time.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bdir=${MFC_BUILDDIR:-$src}
shared=${MFC_SHARED:-$src/../shared}
secs=${1:-3}
vocab="$shared/data/vocab"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

command -v node >/dev/null || { echo "tokenizer.sh: node is not installed" >&2; exit 1; }
[ -d "$vocab" ] || { echo "tokenizer.sh: $vocab not found (set MFC_SHARED)" >&2; exit 1; }

find "$src/tests/tools/node/node_modules" -name '*.md' -print0 | LC_ALL=C sort -z |
    xargs -0 cat >"$work/prose.txt"
python3 - "$vocab/ggml-vocab-llama-spm.gguf.inp" "$work/mixed.txt" <<'EOF'
import sys
cases = open(sys.argv[1], encoding="utf-8").read().split("\n__ggml_vocab_test__\n")[:-1]
text = "\n".join(cases)
open(sys.argv[2], "w", encoding="utf-8").write(text * (500_000 // len(text.encode()) + 1))
EOF
"$bdir/tests/tools/mkmodel" -o "$work/llama-bpe.gguf" --vocab-json "$vocab/llama3-tokenizer.json" \
    --layers 1 --embd 32 --ff 32 --heads 1 --kv-heads 1 --type f16 --tied

field() { python3 -c 'import json,sys; print("%.2f" % json.loads(sys.stdin.read())[sys.argv[1]])' "$1"; }
ntok() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["tokens"])'; }

printf '| vocab | text | bytes | tokens | mfc MB/s | llama.cpp MB/s | mfc / llama.cpp |\n'
printf '|---|---|---:|---:|---:|---:|---:|\n'
for v in llama-bpe llama-spm gpt-2; do
    g="$vocab/ggml-vocab-$v.gguf"
    [ "$v" = llama-bpe ] && g="$work/llama-bpe.gguf"
    for t in prose prose/2k mixed; do
        f="$work/${t%/*}.txt"
        chunk=()
        [ "$t" = prose/2k ] && chunk=(--chunk 2048)
        mine=$("$bdir/tests/tools/toktool" bench "$g" "$f" --seconds "$secs" "${chunk[@]}")
        ref=$(node "$src/tests/tools/llama-tok.mjs" bench --model "$g" --in "$f" --seconds "$secs" \
            "${chunk[@]}" 2>/dev/null)
        a=$(echo "$mine" | field mb_per_s)
        b=$(echo "$ref" | field mb_per_s)
        [ -n "${chunk[*]}" ] || [ "$(echo "$mine" | ntok)" = "$(echo "$ref" | ntok)" ] ||
            echo "tokenizer.sh: token counts differ for $v $t" >&2
        printf '| %s | %s | %d | %d | %s | %s | %.1fx |\n' "$v" "$t" "$(wc -c <"$f")" \
            "$(echo "$mine" | ntok)" "$a" "$b" "$(python3 -c "print($a / $b)")"
    done
done

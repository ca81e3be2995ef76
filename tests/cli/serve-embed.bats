#!/usr/bin/env bats
# serve-embed.bats: mfc-serve's embeddings (POST /v1/embeddings, /api/embed,
# /api/embeddings) on a tiny mkmodel llama: the vectors against llama.cpp's
# (tests/tools/llama-embed.mjs rebuilds llama.cpp's mean pooling), the wire
# formats, bad input, chunked input, generations running beside embeddings,
# and the official openai/ollama clients (tests/tools/embed-client.mjs).
load helpers
load serve_helpers

TEXT='The quick brown fox, 42 times.'

setup_file() {
    serve_model "$BATS_FILE_TMPDIR/toy.gguf"
}

teardown() {
    serve_stop || true
}

post() { # post PATH JSON: prints the body, then the status on its own line
    curl -s -w '\n%{http_code}' -H 'Content-Type: application/json' -d "$2" "$SERVE_URL$1"
}

# against_llama MODEL.gguf REL: our three endpoints against llama.cpp's mean
# pooling of the same tokens: cosine >= 0.9999 and relative L2 error <= REL.
against_llama() {
    local model=$1 tol=$2
    serve_start "$BATS_FILE_TMPDIR" "$model" --name toy
    MFC_NODE_MODULES="$NODE_MODULES" node "$MFC_SRCDIR/tests/tools/llama-embed.mjs" \
        --model "$BATS_FILE_TMPDIR/$model" --text "$TEXT" >"$BATS_TEST_TMPDIR/ref.json"
    body=$(python3 -c 'import json,sys; print(json.dumps({"prompt": sys.argv[1]}))' "$TEXT")
    curl -sf "$SERVE_URL/api/embeddings" -d "$body" >"$BATS_TEST_TMPDIR/legacy.json"
    curl -sf "$SERVE_URL/tokenize" -d "$body" >"$BATS_TEST_TMPDIR/tok.json"
    toks=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))["tokens"]))' \
        "$BATS_TEST_TMPDIR/ref.json")
    curl -sf "$SERVE_URL/v1/embeddings" -d "{\"input\": $toks}" >"$BATS_TEST_TMPDIR/oai.json"
    text=$(python3 -c 'import json,sys; print(json.dumps({"input": sys.argv[1]}))' "$TEXT")
    curl -sf "$SERVE_URL/api/embed" -d "$text" >"$BATS_TEST_TMPDIR/embed.json"
    run python3 - "$BATS_TEST_TMPDIR" "$tol" <<'EOF'
import json, math, sys
d, tol = sys.argv[1], float(sys.argv[2])
ld = lambda n: json.load(open(f"{d}/{n}.json"))
ref, tok = ld("ref"), ld("tok")
raw = ld("legacy")["embedding"]
oai = ld("oai")["data"][0]["embedding"]
emb = ld("embed")["embeddings"][0]
norm = lambda v: math.sqrt(sum(x * x for x in v))
cos = lambda a, b: sum(x * y for x, y in zip(a, b)) / norm(a) / norm(b)
rel = lambda a, b: norm([x - y for x, y in zip(a, b)]) / norm(b)
mean = ref["mean"]
unit = [x / norm(mean) for x in mean]
assert tok["tokens"] == ref["tokens"], ("tokenization differs", tok["tokens"], ref["tokens"])
assert len(raw) == len(mean) == len(oai) == len(emb)
print(f"legacy (raw mean) vs llama.cpp mean: cos {cos(raw, mean):.9f} rel {rel(raw, mean):.2e}")
print(f"v1 (tokens, L2) vs llama.cpp mean/|mean|: cos {cos(oai, unit):.9f} rel {rel(oai, unit):.2e}")
print(f"api/embed (text, L2) vs llama.cpp: rel {rel(emb, unit):.2e}; "
      f"vs llama.cpp's own last-token pooling: cos {cos(raw, ref['last']):.4f}")
assert cos(raw, mean) >= 0.9999 and rel(raw, mean) <= tol
assert cos(oai, unit) >= 0.9999 and rel(oai, unit) <= tol
assert rel(emb, unit) <= tol
assert abs(norm(oai) - 1) < 1e-5 and abs(norm(emb) - 1) < 1e-5
EOF
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "embeddings: mean pooling equals llama.cpp's, F32 model (cosine >= 0.9999, relative L2 <= 2e-3)" {
    require_llama
    against_llama toy.gguf 2e-3
}

@test "embeddings: mean pooling equals llama.cpp's, Q4_K_M model (cosine >= 0.9999, relative L2 <= 2e-2)" {
    require_llama
    "$MKMODEL" -o "$BATS_FILE_TMPDIR/q4.gguf" --preset toy --type q4_k_m >/dev/null
    against_llama q4.gguf 2e-2
}

@test "embeddings: OpenAI, Ollama and legacy wire formats" {
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy
    curl -sf "$SERVE_URL/tokenize" -d '{"prompt": "alpha"}' >"$BATS_TEST_TMPDIR/t1.json"
    curl -sf "$SERVE_URL/tokenize" -d '{"prompt": "beta gamma"}' >"$BATS_TEST_TMPDIR/t2.json"
    curl -sf "$SERVE_URL/v1/embeddings" -d '{"model": "toy", "input": ["alpha", "beta gamma"]}' \
        >"$BATS_TEST_TMPDIR/f.json"
    curl -sf "$SERVE_URL/v1/embeddings" \
        -d '{"input": ["alpha", "beta gamma"], "encoding_format": "base64"}' >"$BATS_TEST_TMPDIR/b.json"
    curl -sf "$SERVE_URL/api/embed" -d '{"model": "toy", "input": ["alpha", "beta gamma"]}' \
        >"$BATS_TEST_TMPDIR/o.json"
    curl -sf "$SERVE_URL/api/embed" -d '{"model": "toy", "input": "alpha"}' >"$BATS_TEST_TMPDIR/o1.json"
    curl -sf "$SERVE_URL/api/embeddings" -d '{"model": "toy", "prompt": "alpha"}' >"$BATS_TEST_TMPDIR/l.json"
    run python3 - "$BATS_TEST_TMPDIR" <<'EOF'
import base64, json, math, struct, sys
d = sys.argv[1]
ld = lambda n: json.load(open(f"{d}/{n}.json"))
f, b, o, o1, l = ld("f"), ld("b"), ld("o"), ld("o1"), ld("l")
n1, n2 = ld("t1")["count"], ld("t2")["count"]
norm = lambda v: math.sqrt(sum(x * x for x in v))
assert f["object"] == "list" and f["model"] == "toy", f.keys()
assert [x["object"] for x in f["data"]] == ["embedding"] * 2
assert [x["index"] for x in f["data"]] == [0, 1]
assert f["usage"] == {"prompt_tokens": n1 + n2, "total_tokens": n1 + n2}, f["usage"]
v0, v1 = f["data"][0]["embedding"], f["data"][1]["embedding"]
assert len(v0) == 256 and abs(norm(v0) - 1) < 1e-5 and abs(norm(v1) - 1) < 1e-5
assert max(abs(x - y) for x, y in zip(v0, v1)) > 1e-3  # different inputs, different vectors
for i, x in enumerate(b["data"]):
    raw = base64.b64decode(x["embedding"])
    dec = struct.unpack(f"<{len(raw) // 4}f", raw)
    want = f["data"][i]["embedding"]
    assert len(dec) == 256 and all(abs(p - q) <= 1e-7 * max(1, abs(q)) for p, q in zip(dec, want))
assert set(o) >= {"model", "embeddings", "total_duration", "load_duration", "prompt_eval_count"}
assert o["model"] == "toy" and o["prompt_eval_count"] == n1 + n2
assert o["embeddings"] == [v0, v1]  # same numbers as /v1/embeddings
assert o1["embeddings"] == [v0] and o1["prompt_eval_count"] == n1
raw = l["embedding"]  # legacy: the mean itself, not normalised
assert list(l) == ["embedding"] and abs(norm(raw) - 1) > 1e-3
assert max(abs(x / norm(raw) - y) for x, y in zip(raw, v0)) < 1e-6
print("ok")
EOF
    echo "$output"
    [ "$status" -eq 0 ]
    run post /v1/embeddings '{"model": "nope", "input": "x"}'
    [ "${lines[-1]}" = 404 ]
    grep -q "model 'nope' does not exist\|The model 'nope' does not exist" <<<"$output"
    run post /v1/embeddings '{"input": "x", "dimensions": 8}'
    [ "${lines[-1]}" = 400 ]
    grep -q "'dimensions' is 8 but this model's embeddings have 256" <<<"$output"
    run curl -s -o /dev/null -w '%{http_code}' "$SERVE_URL/v1/embeddings"
    [ "$output" = 405 ]
}

@test "embeddings: bad input is a 400 naming the field" {
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy --ctx 32
    long=$(python3 -c 'print("word " * 200)')
    check() { # check PATH BODY STATUS MESSAGE
        run post "$1" "$2"
        echo "$1 $2 -> $output"
        [ "${lines[-1]}" = "$3" ]
        grep -qF -- "$4" <<<"$output"
    }
    check /v1/embeddings '' 400 'empty request body'
    check /v1/embeddings '{"input": ' 400 'request body'
    check /v1/embeddings '[1]' 400 'request body must be a JSON object'
    check /v1/embeddings '{}' 400 "'input' is required"
    check /v1/embeddings '{"input": ""}' 400 "'input' is an empty string"
    check /v1/embeddings '{"input": []}' 400 "'input' is an empty array"
    check /v1/embeddings '{"input": [[]]}' 400 "'input[0]' is an empty token list"
    check /v1/embeddings '{"input": ["a", ""]}' 400 "'input[1]' is an empty string"
    check /v1/embeddings '{"input": 7}' 400 "'input' must be a string, an array of strings"
    check /v1/embeddings '{"input": [true]}' 400 "'input[0]' must be a string or an array of token ids"
    check /v1/embeddings '{"input": ["a", [1, 2]]}' 400 "mixes strings and token arrays"
    check /v1/embeddings '{"input": [1, -2]}' 400 "'input[1]' must be a token id"
    check /v1/embeddings '{"input": [1, 99999]}' 400 "'input[1]' is token 99999; the vocabulary has 512 tokens"
    check /v1/embeddings '{"input": "a", "encoding_format": "hex"}' 400 "'encoding_format' must be"
    check /v1/embeddings '{"input": "a", "model": 3}' 400 "'model' must be a string"
    check /v1/embeddings "{\"input\": \"$long\"}" 400 "more than the context length of 32"
    grep -q '"code":"context_length_exceeded"' <<<"$output"
    check /api/embed '{"input": 5}' 400 '"error":"'"'input' must be a string or an array of strings"
    check /api/embed '{"input": [[1, 2]]}' 400 "'input[0]' must be a string"
    check /api/embed '{"input": "a", "truncate": "yes"}' 400 "'truncate' must be true or false"
    check /api/embed "{\"input\": \"$long\", \"truncate\": false}" 400 "or leave 'truncate' true"
    check /api/embeddings '{"model": "toy"}' 400 "'prompt' is required"
    check /api/embeddings '{"prompt": ["a"]}' 400 "'prompt' must be a string"
    check /api/embeddings '{"prompt": ""}' 400 "'prompt' is an empty string"
    # Ollama's default truncate keeps the first context-length tokens
    run post /api/embed "{\"input\": \"$long\"}"
    [ "${lines[-1]}" = 200 ]
    [ "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["prompt_eval_count"])' "${lines[0]}")" = 32 ]
    # the server is still fine
    run post /api/embed '{"input": "ok"}'
    [ "${lines[-1]}" = 200 ]
}

@test "embeddings: an input longer than one step (MFC_MAX_BATCH_TOKENS 16) gives the same vector" {
    body=$(python3 -c 'import json,sys; print(json.dumps({"input": sys.argv[1]}))' "$TEXT $TEXT $TEXT")
    serve_start "$BATS_FILE_TMPDIR" toy.gguf
    curl -sf "$SERVE_URL/v1/embeddings" -d "$body" >"$BATS_TEST_TMPDIR/one.json"
    serve_stop
    export MFC_MAX_BATCH_TOKENS=16
    serve_start "$BATS_FILE_TMPDIR" toy.gguf
    unset MFC_MAX_BATCH_TOKENS
    curl -sf "$SERVE_URL/v1/embeddings" -d "$body" >"$BATS_TEST_TMPDIR/chunked.json"
    grep -q 'embeddings: CPU backend with [0-9]* KV blocks, 16 tokens per step' "$SERVE_LOG"
    run python3 - "$BATS_TEST_TMPDIR" <<'EOF'
import json, sys
d = sys.argv[1]
a = json.load(open(f"{d}/one.json"))["data"][0]["embedding"]
b = json.load(open(f"{d}/chunked.json"))["data"][0]["embedding"]
diff = max(abs(x - y) for x, y in zip(a, b))
print("max abs difference", diff)
assert len(a) == len(b) == 256 and diff < 1e-5
EOF
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "embeddings: generations running beside embeddings are unchanged" {
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy
    gen='{"model": "toy", "prompt": "Once upon a time", "raw": true, "stream": false,
          "options": {"temperature": 0, "num_predict": 48}}'
    curl -sf "$SERVE_URL/api/generate" -d "$gen" >"$BATS_TEST_TMPDIR/alone.json"
    curl -sf "$SERVE_URL/api/embed" -d '{"input": ["alpha", "beta gamma"]}' >"$BATS_TEST_TMPDIR/e0.json"
    # two generations and a stream of embeddings requests at once
    pids=()
    curl -sf "$SERVE_URL/api/generate" -d "$gen" >"$BATS_TEST_TMPDIR/g1.json" &
    pids+=($!)
    curl -sf "$SERVE_URL/api/generate" -d "$gen" >"$BATS_TEST_TMPDIR/g2.json" &
    pids+=($!)
    for i in 1 2 3 4 5 6 7 8; do
        curl -sf "$SERVE_URL/api/embed" -d '{"input": ["alpha", "beta gamma"]}' \
            >"$BATS_TEST_TMPDIR/e$i.json" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    run python3 - "$BATS_TEST_TMPDIR" <<'EOF'
import json, sys
d = sys.argv[1]
ld = lambda n: json.load(open(f"{d}/{n}.json"))
alone = ld("alone")
assert alone["eval_count"] == 48, alone
for g in ("g1", "g2"):
    assert ld(g)["response"] == alone["response"], (g, ld(g)["response"], alone["response"])
e0 = ld("e0")["embeddings"]
for i in range(1, 9):
    assert ld(f"e{i}")["embeddings"] == e0, i
print("ok")
EOF
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(metric 'mfc:num_requests_running')" = 0 ]
}

@test "embeddings: the openai and ollama npm clients get the same vectors" {
    require_node_clients
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --name toy
    MFC_NODE_MODULES="$NODE_MODULES" node "$MFC_SRCDIR/tests/tools/embed-client.mjs" \
        --base "$SERVE_URL" --model toy --text "$TEXT" >"$BATS_TEST_TMPDIR/clients.json"
    body=$(python3 -c 'import json,sys; print(json.dumps({"input": sys.argv[1]}))' "$TEXT")
    curl -sf "$SERVE_URL/v1/embeddings" -d "$body" >"$BATS_TEST_TMPDIR/curl.json"
    run python3 - "$BATS_TEST_TMPDIR" <<'EOF'
import json, math, sys
d = sys.argv[1]
c = json.load(open(f"{d}/clients.json"))
want = json.load(open(f"{d}/curl.json"))["data"][0]["embedding"]
close = lambda a, b, tol: len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b))
assert c["openai"]["object"] == "list" and c["openai"]["n"] == 1 and c["openai"]["index"] == 0
assert c["openai"]["usage"]["prompt_tokens"] > 1
assert close(c["openai"]["embedding"], want, 1e-7)  # decoded from base64 float32
assert c["ollama"]["model"] == "toy" and close(c["ollama"]["embeddings"][0], want, 1e-9)
assert c["ollama"]["prompt_eval_count"] == c["openai"]["usage"]["prompt_tokens"]
raw = c["legacy"]["embedding"]
n = math.sqrt(sum(x * x for x in raw))
assert close([x / n for x in raw], want, 1e-6)
print("ok")
EOF
    echo "$output"
    [ "$status" -eq 0 ]
}

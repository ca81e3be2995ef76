#!/usr/bin/env bats
# serve-limits.bats: mfc-serve under abuse (runtime/serve/serve_door.c,
# docs/api.md "Limits"): 2,000 slowloris connections (tests/cli/slowloris.py,
# from eight loopback addresses, dripping a header byte every 500 ms) do not
# keep /health or a completion from answering in under a second, and are cut
# with a 408 JSON at the read timeout; the per-client and the total
# connection caps answer 503 JSON, and others are still served (GET /health
# passes even a full server, for liveness probes); every error
# raised below the router (bad or duplicate Content-Length, Content-Length
# with chunked, 413 by length, 414, 431, 505, 501, no Host) is the
# documented JSON, in Ollama's shape under /api/; the settings come from
# flags, MFC_* and model.yaml's server: mapping.
load helpers
load serve_helpers

setup_file() {
    serve_model "$BATS_FILE_TMPDIR/toy.gguf"
}

teardown() {
    serve_stop || true
}

# raw PATH-TO-BYTES: sends the bytes (printf format) to the server, prints the answer
raw() {
    python3 - "$SERVE_PORT" "$1" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode("latin-1"))
data = b""
while True:
    c = s.recv(65536)
    if not c:
        break
    data += c
sys.stdout.write(data.decode("utf-8", "replace"))
EOF
}

# check_json_error OUTPUT STATUS CODE: the status line, the JSON content type,
# "Connection: close", and an OpenAI error body with that code
check_json_error() {
    local out=$1 status=$2 code=$3
    [[ "$out" == "HTTP/1.1 $status "* ]] || { echo "got: $out"; false; }
    grep -qi '^content-type: application/json' <<<"$out"
    grep -qi '^connection: close' <<<"$out"
    [[ "$out" != *"<html"* ]]
    sed '1,/^\r\{0,1\}$/d' <<<"$out" | jq -e --arg c "$code" '.error.code == $c and (.error.message | length > 0)'
}

@test "slowloris: 2000 slow connections held, /health and a completion still answered in < 1 s, the slow ones cut with 408 at the read timeout" {
    serve_start "$BATS_FILE_TMPDIR" toy.gguf --read-timeout 3
    ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
    start=$SECONDS
    run python3 "$MFC_SRCDIR/tests/cli/slowloris.py" hold "$SERVE_PORT" 2000 8 500 20
    [ "$status" -eq 0 ]
    echo "$output"
    r=$output
    want=$(jq -r '[2000, .fd_limit - 64] | min' <<<"$r")
    # all of them were open and held when the probes ran
    jq -e --argjson w "$want" '.opened == $w and .held == $w' <<<"$r"
    # every probe answered 200, each in under a second
    jq -e '[.probes[] | .[0] == 200 and .[1] < 1000] | all' <<<"$r"
    # the slow ones were cut: each with a 408 JSON, by the read timeout (3 s, checked
    # every 100 ms) and a little scheduling
    jq -e '.still_open == 0 and .closed_silently == 0 and .answered == .opened' <<<"$r"
    jq -e '.closed_by_s >= 2.5 and .closed_by_s < 8' <<<"$r"
    # and the server is fine afterwards
    [ "$(curl -s "$SERVE_URL/health" | jq -r .status)" = ok ]
    [ $((SECONDS - start)) -lt 25 ]
}

@test "a client over its connection cap gets 503 JSON; others are served; a full server answers 503 JSON" {
    MFC_MAX_CONNECTIONS_PER_CLIENT=20 serve_start "$BATS_FILE_TMPDIR" toy.gguf --max-connections 50 \
        --read-timeout 5
    run python3 "$MFC_SRCDIR/tests/cli/slowloris.py" cap "$SERVE_PORT" 127.0.0.2 20
    [ "$status" -eq 0 ]
    echo "$output"
    jq -e '.same[0] == 503 and (.same[1] | fromjson | .error.code == "too_many_connections")' <<<"$output"
    jq -e '.other[0] == 200' <<<"$output"
    # 20 from each of .3 and .4, 10 from .5: the server is full for everyone
    python3 - "$SERVE_PORT" <<'EOF'
import json, socket, sys, time
port = int(sys.argv[1])
held = []
for src, n in (("127.0.0.3", 20), ("127.0.0.4", 20), ("127.0.0.5", 10)):
    for _ in range(n):
        s = socket.socket()
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        held.append(s)
time.sleep(0.5)
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(b"GET /api/tags HTTP/1.1\r\nHost: x\r\n\r\n")
data = b""
while True:
    c = s.recv(4096)
    if not c:
        break
    data += c
head, _, body = data.partition(b"\r\n\r\n")
assert head.startswith(b"HTTP/1.1 503 "), data
assert b"Retry-After: 1" in head, head
assert json.loads(body) == {"error": "the server is at its connection limit; retry later"}, body
# a liveness probe still gets through a full server
s = socket.create_connection(("127.0.0.1", port), timeout=10)
s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
data = s.recv(4096)
assert data.startswith(b"HTTP/1.1 200 "), data
for s in held:
    s.close()
EOF
    # once they are gone, it serves again
    for _ in $(seq 50); do curl -sf "$SERVE_URL/health" >/dev/null && break; sleep 0.1; done
    [ "$(curl -s "$SERVE_URL/health" | jq -r .status)" = ok ]
}

@test "errors below the router are the documented JSON: bad Content-Length, 413 by length, 414, 431, 505, 501, no Host" {
    MFC_MAX_BODY=2048 serve_start "$BATS_FILE_TMPDIR" toy.gguf
    check_json_error "$(raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n')" 400 invalid_request
    check_json_error "$(raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello')" 400 invalid_request
    check_json_error "$(raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n')" 400 invalid_request
    check_json_error "$(raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n')" 413 request_too_large
    check_json_error "$(raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2049\r\n\r\n')" 413 request_too_large
    check_json_error "$(raw "GET /$(printf 'a%.0s' $(seq 9000)) HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")" 414 uri_too_long
    check_json_error "$(raw "GET /health HTTP/1.1\\r\\nHost: x\\r\\nX-Big: $(head -c 40000 /dev/zero | tr '\0' b)\\r\\n\\r\\n")" 431 request_header_fields_too_large
    check_json_error "$(raw 'GET /health HTTP/2.0\r\n\r\n')" 505 http_version_not_supported
    check_json_error "$(raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n')" 501 not_implemented
    check_json_error "$(raw 'GET /health HTTP/1.1\r\n\r\n')" 400 invalid_request
    check_json_error "$(raw 'NOT HTTP AT ALL\r\n\r\n')" 400 invalid_request
    # under /api/, Ollama's shape
    out=$(raw 'POST /api/generate HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n')
    [[ "$out" == "HTTP/1.1 400 "* ]]
    sed '1,/^\r\{0,1\}$/d' <<<"$out" | jq -e '.error | type == "string"'
    # the router's own errors stay JSON, and a good request still works
    out=$(raw 'GET /nope HTTP/1.1\r\nHost: x\r\n\r\n')
    check_json_error "$out" 404 not_found
    out=$(raw 'GET /health HTTP/1.0\r\n\r\n')
    [[ "$out" == "HTTP/1.1 200 "* ]]
    grep -q '"ok"' <<<"$out"
    # the log names what the door refused
    grep -q 'access method=POST path=/v1/completions status=413 .*door=1' "$SERVE_LOG"
}

@test "the limits come from flags, MFC_* and model.yaml's server: mapping; bad values are refused" {
    local d="$BATS_TEST_TMPDIR"
    printf 'schema: "mfc.config/v1"\nmodel:\n  path: "%s"\nserver:\n  read-timeout: 1\n  max-connections-per-client: 7\n' \
        "$BATS_FILE_TMPDIR/toy.gguf" >"$d/model.yaml"
    cp "$BATS_FILE_TMPDIR/toy.gguf" "$d/"
    serve_start "$d" toy.gguf --config "$d/model.yaml"
    # read-timeout 1 from the yaml: a silent connection is cut with a 408 in about a second
    run python3 - "$SERVE_PORT" <<'EOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"GET /health HTTP/1.1\r\n")
t0 = time.monotonic()
data = s.recv(4096)
print(round(time.monotonic() - t0, 1), data.split(b"\r\n")[0].decode())
EOF
    [[ "$output" == *"HTTP/1.1 408 Request Timeout" ]]
    awk '{ exit !($1 >= 0.8 && $1 < 3) }' <<<"$output"
    # a body that stops arriving: the same 408, as JSON, after a second of silence
    run python3 - "$SERVE_PORT" <<'EOF'
import json, socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\":")
t0 = time.monotonic()
data = b""
while True:
    d = s.recv(4096)
    if not d:
        break
    data += d
head, _, body = data.partition(b"\r\n\r\n")
print(round(time.monotonic() - t0, 1), head.split(b"\r\n")[0].decode(), json.loads(body)["error"]["code"])
EOF
    [[ "$output" == *"HTTP/1.1 408 Request Timeout request_timeout" ]]
    awk '{ exit !($1 >= 0.8 && $1 < 3) }' <<<"$output"
    run python3 "$MFC_SRCDIR/tests/cli/slowloris.py" cap "$SERVE_PORT" 127.0.0.6 7
    jq -e '.same[0] == 503 and .other[0] == 200' <<<"$output"
    serve_stop
    # the environment beats the yaml
    MFC_MAX_CONNECTIONS_PER_CLIENT=9 serve_start "$d" toy.gguf --config "$d/model.yaml"
    run python3 "$MFC_SRCDIR/tests/cli/slowloris.py" cap "$SERVE_PORT" 127.0.0.6 7
    jq -e '.same[0] == 200' <<<"$output"
    serve_stop
    run "$MFC_SERVE_BIN" --model "$BATS_FILE_TMPDIR/toy.gguf" --read-timeout 0
    [ "$status" -eq 2 ]
    [[ "$output" == *"read timeout"* ]]
    printf 'schema: "mfc.config/v1"\nserver:\n  read-timeuot: 5\n' >"$d/bad.yaml"
    run "$MFC_SERVE_BIN" --model "$BATS_FILE_TMPDIR/toy.gguf" --config "$d/bad.yaml"
    [ "$status" -ne 0 ]
    [[ "$output" == *"server.read-timeuot is not a setting"* ]]
}

#!/usr/bin/env bats
# fetch.bats: `mfc fetch` against a real local HTTP server (tests/tools/httpd.py):
# plain downloads, resume after a dropped connection (checked from the
# server's log of Range headers), retries, pins, redirects, hf://, and local
# file and directory sources. Every test has its own store ($MFC_HOME).

load helpers

setup_file() {
    export SRV_DIR="$BATS_FILE_TMPDIR/srv"
    mkdir -p "$SRV_DIR/root/hf/acme/tiny/v1/sub" "$SRV_DIR/root/hf/acme/tiny/main"
    # 300 KB of fixed pseudo-random bytes: big enough for several socket reads
    python3 -c 'import random,sys; r=random.Random(7); sys.stdout.buffer.write(bytes(r.getrandbits(8) for _ in range(300000)))' \
        >"$SRV_DIR/root/model.gguf"
    cp "$SRV_DIR/root/model.gguf" "$SRV_DIR/root/hf/acme/tiny/v1/sub/model.gguf"
    echo "main branch" >"$SRV_DIR/root/hf/acme/tiny/main/README.md"
    python3 "$MFC_SRCDIR/tests/tools/httpd.py" --root "$SRV_DIR/root" \
        --port-file "$SRV_DIR/port" --log "$SRV_DIR/log" --lifetime 900 3>&- &
    echo $! >"$SRV_DIR/pid"
    for _ in $(seq 600); do [ -s "$SRV_DIR/port" ] && break; sleep 0.1; done
    [ -s "$SRV_DIR/port" ]
}

teardown_file() {
    kill "$(cat "$SRV_DIR/pid")" 2>/dev/null || true
}

setup() {
    export MFC_HOME="$BATS_TEST_TMPDIR/store"
    PORT=$(cat "$SRV_DIR/port")
    BASE="http://127.0.0.1:$PORT"
    SUM=sha256:$(sha256sum "$SRV_DIR/root/model.gguf" | cut -d' ' -f1)
    unset HF_TOKEN HF_ENDPOINT
}

# The server's log lines for one request path, as "status range sent".
requests() {
    python3 - "$SRV_DIR/log" "$1" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    e = json.loads(line)
    if e["path"] == sys.argv[2]:
        print(e["status"], e["range"] or "-", e["sent"])
EOF
}

blob_count() {
    ls "$MFC_HOME/blobs/sha256" 2>/dev/null | wc -l
}

@test "a plain download lands as a verified blob and prints digest, size, source" {
    run "$MFC" fetch --progress=plain "$BASE/model.gguf"
    [ "$status" -eq 0 ]
    [[ "${lines[-1]}" == "$SUM 300000 $BASE/model.gguf" ]]
    [[ "$output" == *"#1 fetch $BASE/model.gguf done 293 KiB"* ]]
    cmp "$MFC_HOME/blobs/sha256/${SUM#sha256:}" "$SRV_DIR/root/model.gguf"
    [ -z "$(ls "$MFC_HOME/tmp")" ]
}

@test "an unchanged URL is not downloaded again (If-None-Match, 304)" {
    "$MFC" fetch --progress=quiet "$BASE/model.gguf?again"
    run "$MFC" fetch --progress=plain "$BASE/model.gguf?again"
    [ "$status" -eq 0 ]
    [[ "$output" == *"CACHED"* ]]
    run python3 -c 'import json,sys; print([json.loads(l)["status"] for l in open(sys.argv[1]) if json.loads(l)["path"]=="/model.gguf?again"])' "$SRV_DIR/log"
    [ "$output" = "[200, 304]" ]
}

@test "a dropped connection is resumed with a Range request, no byte fetched twice" {
    run "$MFC" fetch --progress=plain --retry-delay=10 "$BASE/drop/70000/model.gguf"
    [ "$status" -eq 0 ]
    [[ "${lines[-1]}" == "$SUM 300000 "* ]]
    [[ "$output" == *"retrying in 10 ms"*"70000 bytes kept"* ]]
    run requests /drop/70000/model.gguf
    [ "${lines[0]}" = "200 - 70000" ]
    [ "${lines[1]}" = "206 bytes=70000- 230000" ]
    [ "${#lines[@]}" -eq 2 ]
}

@test "an interrupted download is resumed by the next run" {
    run "$MFC" fetch --progress=quiet --retries=0 "$BASE/drop/12345/model.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"gave up after 1 failed attempt"* ]]
    [ "$(blob_count)" -eq 0 ]
    partial=$(ls "$MFC_HOME"/tmp/partial-* | grep -v json)
    [ "$(stat -c %s "$partial")" -eq 12345 ]
    run "$MFC" fetch --progress=quiet "$BASE/drop/12345/model.gguf"
    [ "$status" -eq 0 ]
    [[ "$output" == "$SUM 300000 "* ]]
    run requests /drop/12345/model.gguf
    [ "${lines[0]}" = "200 - 12345" ]
    [ "${lines[1]}" = "206 bytes=12345- 287655" ]
    [ -z "$(ls "$MFC_HOME/tmp")" ]
}

@test "a file that changed on the server since the partial download starts over" {
    head -c 50000 "$SRV_DIR/root/model.gguf" >"$SRV_DIR/root/changing.bin"
    run "$MFC" fetch --progress=quiet --retries=0 "$BASE/drop/20000/changing.bin"
    [ "$status" -eq 1 ]
    echo "new content" >"$SRV_DIR/root/changing.bin"
    run "$MFC" fetch --progress=quiet "$BASE/drop/20000/changing.bin"
    [ "$status" -eq 0 ]
    [ "$output" = "sha256:$(sha256sum "$SRV_DIR/root/changing.bin" | cut -d' ' -f1) 12 $BASE/drop/20000/changing.bin" ]
    run requests /drop/20000/changing.bin
    [ "${lines[1]}" = "200 bytes=20000- 12" ] # If-Range no longer matched: the whole file
}

@test "an empty file is a valid blob, also when it replaced a partly fetched one" {
    empty=sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
    : >"$SRV_DIR/root/empty.bin"
    run "$MFC" fetch --progress=quiet "$BASE/empty.bin"
    [ "$status" -eq 0 ]
    [ "$output" = "$empty 0 $BASE/empty.bin" ]
    head -c 9000 "$SRV_DIR/root/model.gguf" >"$SRV_DIR/root/emptied.bin"
    run "$MFC" fetch --progress=quiet --retries=0 "$BASE/drop/3000/emptied.bin"
    [ "$status" -eq 1 ]
    : >"$SRV_DIR/root/emptied.bin"
    run "$MFC" fetch --progress=quiet "$BASE/drop/3000/emptied.bin"
    [ "$status" -eq 0 ]
    [ "$output" = "$empty 0 $BASE/drop/3000/emptied.bin" ]
}

@test "a 503 is retried and the download then succeeds" {
    run "$MFC" fetch --progress=plain --retry-delay=10 "$BASE/fail503/1/model.gguf"
    [ "$status" -eq 0 ]
    [[ "$output" == *"retrying in 10 ms: HTTP 503"* ]]
    run requests /fail503/1/model.gguf
    [ "${lines[0]}" = "503 - 5" ]
    [ "${lines[1]}" = "200 - 300000" ]
}

@test "retries are bounded: a server that keeps failing is an error" {
    run "$MFC" fetch --progress=quiet --retries=2 --retry-delay=1 "$BASE/fail503/9/model.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"gave up after 3 failed attempts: HTTP 503"* ]]
    [ "$(blob_count)" -eq 0 ]
}

@test "a checksum pin mismatch names both digests and stores nothing" {
    wrong=sha256:$(printf '%064d' 0)
    run "$MFC" fetch --progress=quiet --checksum="$wrong" "$BASE/model.gguf?pin"
    [ "$status" -eq 1 ]
    [[ "$output" == *"expected $wrong, got $SUM"* ]]
    [[ "$output" == *"nothing was stored"* ]]
    [ "$(blob_count)" -eq 0 ]
    [ -z "$(ls "$MFC_HOME/tmp")" ]
}

@test "an @sha256 pin is verified, and a pinned blob already stored needs no network" {
    run "$MFC" fetch --progress=quiet "$BASE/model.gguf?p2@$SUM"
    [ "$status" -eq 0 ]
    n=$(wc -l <"$SRV_DIR/log")
    run "$MFC" fetch --progress=plain "http://127.0.0.1:1/unreachable.gguf@$SUM"
    [ "$status" -eq 0 ]
    [[ "$output" == *"CACHED"* ]]
    [ "$(wc -l <"$SRV_DIR/log")" -eq "$n" ]
    run "$MFC" fetch "$BASE/model.gguf@sha256:abc"
    [ "$status" -eq 1 ]
    [[ "$output" == *"64 lowercase hex"* ]]
}

@test "redirects are followed, up to a limit" {
    run "$MFC" fetch --progress=quiet "$BASE/redirect/3/model.gguf"
    [ "$status" -eq 0 ]
    [[ "$output" == "$SUM 300000 "* ]]
    [ "$(requests /redirect/1/model.gguf)" = "302 - 0" ]
    run "$MFC" fetch --progress=quiet "$BASE/redirect/12/model.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"more than 10 redirects"* ]]
}

@test "hf:// maps to HF_ENDPOINT's resolve URL and sends HF_TOKEN as a bearer token" {
    HF_ENDPOINT="$BASE" HF_TOKEN=tok123 run "$MFC" fetch --progress=quiet \
        hf://acme/tiny@v1/sub/model.gguf
    [ "$status" -eq 0 ]
    [ "$output" = "$SUM 300000 hf://acme/tiny@v1/sub/model.gguf" ]
    run python3 -c 'import json,sys; print([json.loads(l)["authorization"] for l in open(sys.argv[1]) if "/resolve/v1/" in l])' "$SRV_DIR/log"
    [ "$output" = "['Bearer tok123']" ]
    HF_ENDPOINT="$BASE/" run "$MFC" fetch --progress=quiet hf://acme/tiny/README.md
    [ "$status" -eq 0 ]
    [ "$(requests /acme/tiny/resolve/main/README.md)" = "200 - 12" ]
}

@test "HF_TOKEN is not sent on to another host when the Hub redirects" {
    HF_ENDPOINT="http://localhost:$PORT" HF_TOKEN=tok456 run "$MFC" fetch --progress=quiet \
        hf://acme/tiny@cdn/README.md
    [ "$status" -eq 0 ]
    # (status, Authorization) seen by the Hub and by the CDN host, as sets:
    # a retried request may appear twice, but never with another header
    run python3 -c '
import json, sys
log = [json.loads(l) for l in open(sys.argv[1])]
hub = {(e["status"], e["authorization"]) for e in log if e["path"] == "/acme/tiny/resolve/cdn/README.md"}
cdn = {(e["status"], e["authorization"]) for e in log if e["path"] == "/hf/acme/tiny/main/README.md"}
print(sorted(hub), sorted(cdn))' "$SRV_DIR/log"
    echo "$output"; grep -v model.gguf "$SRV_DIR/log" # shown only when the test fails
    [ "$output" = "[(302, 'Bearer tok456')] [(200, None)]" ]
}

@test "bad hf:// references are rejected before any request" {
    run "$MFC" fetch hf://acme/model.gguf
    [ "$status" -eq 1 ]
    [[ "$output" == *"expected hf://owner/repo[@revision]/path"* ]]
    run "$MFC" fetch hf://acme/tiny/../../etc/passwd
    [ "$status" -eq 1 ]
    [[ "$output" == *'".."'* ]]
}

@test "HTTP errors are reported with the status and the URL" {
    run "$MFC" fetch --progress=quiet "$BASE/missing.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"HTTP 404 from $BASE/missing.gguf"* ]]
    run "$MFC" fetch --progress=quiet "$BASE/auth/model.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"HTTP 401"* ]]
}

@test "a server that sends fewer bytes than Content-Length fails and stores nothing" {
    run "$MFC" fetch --progress=quiet --retries=1 --retry-delay=1 "$BASE/lie/model.gguf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"100 bytes remaining"* ]]
    [ "$(blob_count)" -eq 0 ]
}

@test "--progress=json writes one JSON event per line" {
    run "$MFC" fetch --progress=json "$BASE/model.gguf?json"
    [ "$status" -eq 0 ]
    echo "$output" | grep '^{' | python3 -c '
import json, sys
ev = [json.loads(l) for l in sys.stdin]
assert ev[0] == {"id": 1, "event": "begin", "verb": "fetch", "name": sys.argv[1]}, ev[0]
assert ev[-1]["event"] == "end" and ev[-1]["status"] == "done" and ev[-1]["done"] == 300000
' "$BASE/model.gguf?json"
}

@test "local files resolve against the current directory and ~" {
    mkdir -p "$BATS_TEST_TMPDIR/home/models"
    cp "$SRV_DIR/root/model.gguf" "$BATS_TEST_TMPDIR/home/models/m.gguf"
    cd "$BATS_TEST_TMPDIR/home"
    run "$MFC" fetch models/m.gguf --progress=quiet # options may follow the sources
    [ "$status" -eq 0 ]
    [ "$output" = "$SUM 300000 models/m.gguf" ]
    HOME="$BATS_TEST_TMPDIR/home" run "$MFC" fetch --progress=quiet "~/models/m.gguf@$SUM"
    [ "$status" -eq 0 ]
    run "$MFC" fetch --progress=quiet ./nope.gguf
    [ "$status" -eq 1 ]
    [[ "$output" == *"no such file"* ]]
}

@test "a directory with one GGUF fetches it; two GGUFs is an error listing them" {
    d="$BATS_TEST_TMPDIR/dir"
    mkdir -p "$d"
    cp "$SRV_DIR/root/model.gguf" "$d/only.gguf"
    run "$MFC" fetch --progress=quiet "$d"
    [ "$status" -eq 0 ]
    [[ "$output" == "$SUM 300000 "* ]]
    echo other >"$d/a-second.gguf"
    run "$MFC" fetch --progress=quiet "$d"
    [ "$status" -eq 1 ]
    [[ "$output" == *"has 2 GGUF files (a-second.gguf, only.gguf); name the one to use"* ]]
}

@test "safetensors and PEFT directories are recognised as sources to convert" {
    d="$BATS_TEST_TMPDIR/peft"
    mkdir -p "$d"
    echo '{}' >"$d/adapter_config.json"
    echo x >"$d/adapter_model.safetensors"
    run "$MFC" fetch "$d"
    [ "$status" -eq 1 ]
    [[ "$output" == *"is a PEFT adapter directory: it is converted, not fetched"* ]]
    mkdir -p "$BATS_TEST_TMPDIR/empty"
    run "$MFC" fetch "$BATS_TEST_TMPDIR/empty"
    [ "$status" -eq 1 ]
    [[ "$output" == *"no .gguf file"* ]]
}

@test "usage errors exit 2" {
    run "$MFC" fetch
    [ "$status" -eq 2 ]
    run "$MFC" fetch --progress=loud x
    [ "$status" -eq 2 ]
    run "$MFC" fetch --checksum="$SUM" a b
    [ "$status" -eq 2 ]
}

@test "a big download dropped mid-stream keeps, resumes and restarts byte-exactly" {
    # 10 MB, dropped at 6000000: many 512 KiB receive buffers on each side of
    # the cut; the partial must hold exactly the bytes received.
    head -c 10000000 /dev/urandom >"$SRV_DIR/root/big.bin"
    big=sha256:$(sha256sum "$SRV_DIR/root/big.bin" | cut -d' ' -f1)
    run "$MFC" fetch --progress=quiet --retries=0 "$BASE/drop/6000000/big.bin"
    [ "$status" -eq 1 ]
    partial=$(ls "$MFC_HOME"/tmp/partial-* | grep -v json)
    [ "$(stat -c %s "$partial")" -eq 6000000 ]
    run "$MFC" fetch --progress=quiet "$BASE/drop/6000000/big.bin"
    [ "$status" -eq 0 ]
    [[ "$output" == "$big 10000000 "* ]]
    # httpd.py logs a request after sending its body: wait for the line
    for _ in $(seq 600); do run requests /drop/6000000/big.bin; [ "${#lines[@]}" -ge 2 ] && break; sleep 0.1; done
    [ "${lines[1]}" = "206 bytes=6000000- 4000000" ]
    [ -z "$(ls "$MFC_HOME/tmp")" ]

    # changed on the server after a partial download: a 200 to If-Range, from zero
    run "$MFC" fetch --progress=quiet --retries=0 "$BASE/drop/7000000/big.bin"
    [ "$status" -eq 1 ]
    head -c 9000000 /dev/urandom >"$SRV_DIR/root/big.bin"
    touch -d '+1 hour' "$SRV_DIR/root/big.bin"
    run "$MFC" fetch --progress=quiet --checksum="sha256:$(sha256sum "$SRV_DIR/root/big.bin" | cut -d' ' -f1)" \
        "$BASE/drop/7000000/big.bin"
    [ "$status" -eq 0 ]
    [[ "$output" == "sha256:$(sha256sum "$SRV_DIR/root/big.bin" | cut -d' ' -f1) 9000000 "* ]]
    # httpd.py logs a request after sending its body: wait for the line
    for _ in $(seq 600); do run requests /drop/7000000/big.bin; [ "${#lines[@]}" -ge 2 ] && break; sleep 0.1; done
    [ "${lines[1]}" = "200 bytes=7000000- 9000000" ]
    [ -z "$(ls "$MFC_HOME/tmp")" ]
}

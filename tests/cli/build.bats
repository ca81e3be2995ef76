#!/usr/bin/env bats
# build.bats: `mfc build` and `mfc plan` end to end: local and HTTP sources
# (tests/tools/httpd.py with fault injection, plus a trickling server written
# here for stalls and kill -9), the build cache (what re-runs after which
# change), and atomicity (a failed or killed build leaves no partial blob and
# no new tag, and the next build succeeds). Each test has its own store.

load helpers

setup_file() {
    export SRV_DIR="$BATS_FILE_TMPDIR/srv"
    mkdir -p "$SRV_DIR/root"
    MKMODEL="$MFC_BUILDDIR/tests/tools/mkmodel"
    "$MKMODEL" -o "$SRV_DIR/root/base.gguf" --preset toy --seed 1 >/dev/null
    "$MKMODEL" -o "$SRV_DIR/root/lora.gguf" --preset toy --lora 4 --targets q,v >/dev/null
    python3 "$MFC_SRCDIR/tests/tools/httpd.py" --root "$SRV_DIR/root" \
        --port-file "$SRV_DIR/port" --log "$SRV_DIR/log" --lifetime 900 3>&- &
    echo $! >"$SRV_DIR/pid"
    # a server that sends the headers, then the body at ~20 KB/s (or nothing: /stall)
    cat >"$SRV_DIR/slow.py" <<'EOF'
import sys, time, threading, os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
data = open(sys.argv[1], "rb").read()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            for i in range(0, len(data), 4096):
                if self.path.startswith("/stall"):
                    time.sleep(30)
                self.wfile.write(data[i:i + 4096]); self.wfile.flush(); time.sleep(0.2)
        except OSError:
            pass
srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
srv.daemon_threads = True
open(sys.argv[2] + ".tmp", "w").write(str(srv.server_address[1]))
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
threading.Timer(900, lambda: os._exit(0)).start()
srv.serve_forever()
EOF
    python3 "$SRV_DIR/slow.py" "$SRV_DIR/root/base.gguf" "$SRV_DIR/slowport" 3>&- &
    echo $! >"$SRV_DIR/slowpid"
    for _ in $(seq 600); do [ -s "$SRV_DIR/port" ] && [ -s "$SRV_DIR/slowport" ] && break; sleep 0.1; done
    [ -s "$SRV_DIR/port" ]
}

teardown_file() {
    kill "$(cat "$SRV_DIR/pid")" "$(cat "$SRV_DIR/slowpid")" 2>/dev/null || true
}

setup() {
    export MFC_HOME="$BATS_TEST_TMPDIR/store" MFC_FETCH_RETRY_DELAY_MS=10
    BASE="http://127.0.0.1:$(cat "$SRV_DIR/port")"
    SLOW="http://127.0.0.1:$(cat "$SRV_DIR/slowport")"
    SUM=sha256:$(sha256sum "$SRV_DIR/root/base.gguf" | cut -d' ' -f1)
    CTX="$BATS_TEST_TMPDIR/ctx"
    mkdir -p "$CTX"
    cp "$SRV_DIR/root/base.gguf" "$SRV_DIR/root/lora.gguf" "$CTX/"
}

modelfile() {
    printf '%s\n' "$@" >"$CTX/Modelfile"
}

# Lines of a plain build log ending with a status, as "verb name".
ended() {
    grep -E "^#[0-9]+ .* $1 in " <<<"$output" | sed -E "s/^#[0-9]+ //; s/ $1 in .*//" | sort
}

# Every blob's name is its content's digest: nothing partial or corrupt.
blobs_verify() {
    local f
    for f in "$MFC_HOME"/blobs/sha256/*; do
        [ -e "$f" ] || continue
        [ "$(sha256sum "$f" | cut -d' ' -f1)" = "$(basename "$f")" ] || return 1
    done
}

tags() {
    "$MFC" images 2>/dev/null | tail -n +2 | awk '{print $1}'
}

@test "mfc plan prints the DAG as text, json and dot without touching the store" {
    modelfile "FROM ./base.gguf" "ADAPTER --name=p ./lora.gguf" "SYSTEM hi"
    run "$MFC" plan "$CTX"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "#1 source   FROM ./base.gguf (Modelfile:1)" ]
    [[ "$output" == *"#9 image    image <- #6, #5, #8"* ]]
    run "$MFC" plan --format json "$CTX"
    [ "$(jq '.nodes | length' <<<"$output")" -eq 9 ]
    run "$MFC" plan --format=dot -f "$CTX/Modelfile" "$CTX"
    [[ "$output" == *"n8 -> n9;"* ]]
    [ ! -e "$MFC_HOME" ]
    run "$MFC" plan --format yaml "$CTX"
    [ "$status" -eq 2 ]
}

@test "a build tags the image; an identical rebuild runs no step (all CACHED)" {
    modelfile "FROM ./base.gguf" "ADAPTER --name=p ./lora.gguf" "SYSTEM hi" "LABEL a=b"
    run "$MFC" build --progress plain -t m:1 -t m:2 "$CTX"
    [ "$status" -eq 0 ]
    [[ "$output" == *"[+] Building"*"(9/9) FINISHED"* ]]
    digest="${lines[-1]}"
    [ "$(tags | tr '\n' ' ')" = "m:1 m:2 " ]
    run "$MFC" build --progress plain -t m:1 "$CTX/Modelfile"
    [ "$status" -eq 0 ]
    [ -z "$(ended DONE)" ]
    [ "$(ended CACHED | wc -l)" -eq 9 ]
    [ "${lines[-1]}" = "$digest" ]
    run "$MFC" build -q --no-cache -t m:1 "$CTX"
    [ "$output" = "$digest" ]
    # the first tag is the name the image serves (MFC_MODEL_NAME): another is another image
    run "$MFC" build -q -t other "$CTX"
    [ "$output" != "$digest" ]
    "$MFC" inspect other | jq -e '.config.config.Env | index("MFC_MODEL_NAME=other")'
    blobs_verify
}

@test "changing SYSTEM re-runs only the config path" {
    modelfile "FROM ./base.gguf" "ADAPTER ./lora.gguf" "SYSTEM one"
    "$MFC" build -q "$CTX" >/dev/null
    modelfile "FROM ./base.gguf" "ADAPTER ./lora.gguf" "SYSTEM two"
    run "$MFC" build --progress plain "$CTX"
    [ "$status" -eq 0 ]
    [ "$(ended DONE | tr '\n' '|')" = "config etc/mfc/model.yaml|image image|layer etc/mfc/model.yaml|" ]
}

@test "changing the base file re-runs what depends on it, not the config" {
    modelfile "FROM ./base.gguf" "ADAPTER ./lora.gguf" "SYSTEM one"
    "$MFC" build -q "$CTX" >/dev/null
    "$MFC_BUILDDIR/tests/tools/mkmodel" -o "$CTX/base.gguf" --preset toy --seed 2 >/dev/null
    run "$MFC" build --progress plain "$CTX"
    [ "$status" -eq 0 ]
    [[ "$(ended DONE)" == *"source FROM ./base.gguf"* ]]
    [[ "$(ended DONE)" == *"check ADAPTER ./lora.gguf"* ]]
    [ "$(ended CACHED | tr '\n' '|')" = "config etc/mfc/model.yaml|layer etc/mfc/model.yaml|source ADAPTER ./lora.gguf|" ]
}

@test "an HTTP base dropped mid-body is resumed; 500 then 200 is retried" {
    modelfile "FROM $BASE/drop/70000/base.gguf" "ADAPTER $BASE/fail500/2/lora.gguf"
    run "$MFC" build --progress plain -t web "$CTX"
    [ "$status" -eq 0 ]
    [ -e "$MFC_HOME/blobs/sha256/${SUM#sha256:}" ]
    [ "$(tags)" = "web" ]
}

@test "a 404 fails naming the line, stores nothing and tags nothing; the fixed build succeeds" {
    modelfile "SYSTEM x" "FROM $BASE/nope.gguf"
    run "$MFC" build --progress plain -t bad "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"mfc: Modelfile:2: FROM $BASE/nope.gguf: "*"404"* ]]
    [[ "$output" == *"CANCELED"* ]]
    [ -z "$(tags)" ]
    [ -z "$(ls "$MFC_HOME/tmp" 2>/dev/null)" ]
    blobs_verify
    modelfile "SYSTEM x" "FROM $BASE/base.gguf"
    run "$MFC" build --progress plain -t bad "$CTX"
    [ "$status" -eq 0 ]
    [ "$(tags)" = "bad" ]
}

@test "wrong content for a pinned digest is rejected: no blob, no tag" {
    wrong=sha256:$(printf '%064d' 0)
    modelfile "FROM $BASE/base.gguf@$wrong"
    run "$MFC" build --progress plain -t pinned "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"Modelfile:1: FROM"*"$wrong"* ]]
    [ ! -e "$MFC_HOME/blobs/sha256/${SUM#sha256:}" ]
    [ -z "$(tags)" ]
    modelfile "FROM ./base.gguf@$wrong"
    run "$MFC" build -q -t pinned "$CTX"
    [ "$status" -eq 1 ]
    [ -z "$(tags)" ]
    modelfile "FROM $BASE/base.gguf@$SUM"
    run "$MFC" build -q -t pinned "$CTX"
    [ "$status" -eq 0 ]
    [ "$(tags)" = "pinned" ]
}

@test "a stalled server times out with a message; nothing is tagged" {
    modelfile "FROM $SLOW/stall/base.gguf"
    MFC_FETCH_TIMEOUT=1 run "$MFC" build --progress plain -t slow "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"Modelfile:1: FROM $SLOW/stall/base.gguf: "* ]]
    [[ "$output" == *"too slow"* || "$output" == *"timed out"* ]]
    [ -z "$(tags)" ]
    blobs_verify
}

@test "kill -9 in the middle of a build leaves a store the next build uses" {
    modelfile "FROM $SLOW/base.gguf" "ADAPTER ./lora.gguf" "SYSTEM s"
    "$MFC" build --progress plain -t k "$CTX" >"$BATS_TEST_TMPDIR/log" 2>&1 3>&- &
    pid=$!
    for _ in $(seq 600); do grep -q "config.* DONE" "$BATS_TEST_TMPDIR/log" && break; sleep 0.1; done
    sleep 0.5
    kill -9 "$pid"
    wait "$pid" || true
    [ -z "$(tags)" ]
    blobs_verify
    modelfile "FROM $BASE/base.gguf" "ADAPTER ./lora.gguf" "SYSTEM s"
    run "$MFC" build --progress plain -t k "$CTX"
    [ "$status" -eq 0 ]
    [[ "$(ended CACHED)" == *"config etc/mfc/model.yaml"* ]]
    [[ "$(ended CACHED)" == *"source ADAPTER ./lora.gguf"* ]]
    [ "$(tags)" = "k" ]
    blobs_verify
}

@test "a build killed while it writes a layer: the next build reclaims its temporary files" {
    "$MFC_BUILDDIR/tests/tools/mkmodel" -o "$CTX/big.gguf" --preset 125m --type f32 >/dev/null
    modelfile "FROM ./big.gguf"
    MFC_SERVE= "$MFC" build -q -t k "$CTX" >/dev/null 2>&1 3>&- &
    pid=$!
    # the layer's blob being written is tmp/blob-<pid>-*: kill -9 while it is there
    for _ in $(seq 1200); do compgen -G "$MFC_HOME/tmp/blob-$pid-*" >/dev/null && break; sleep 0.01; done
    compgen -G "$MFC_HOME/tmp/blob-$pid-*" >/dev/null
    kill -9 "$pid"
    wait "$pid" || true
    compgen -G "$MFC_HOME/tmp/blob-$pid-*" >/dev/null   # left behind
    mkdir "$MFC_HOME/tmp/run-$pid-3-x"                  # as a RUN step's /out would be
    : >"$MFC_HOME/tmp/partial-keep"                      # a download to resume: not the build's
    modelfile "FROM ./base.gguf"
    run env MFC_SERVE= "$MFC" build -q -t k "$CTX"
    [ "$status" -eq 0 ]
    [ -z "$(ls "$MFC_HOME/tmp" | grep -- "-$pid-")" ]
    [ ! -e "$MFC_HOME/tmp-owners/$pid" ]
    [ -e "$MFC_HOME/tmp/partial-keep" ]
    blobs_verify
}

@test "usage errors exit 2; a bad Modelfile exits 1 with its diagnostics" {
    run "$MFC" build --bogus "$CTX"
    [ "$status" -eq 2 ]
    run "$MFC" build -t 'Bad Tag' "$CTX"
    [ "$status" -eq 2 ]
    modelfile "FROM ./base.gguf" "PARAMETER temperature hot"
    run "$MFC" build "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"Modelfile:2:"* ]]
    modelfile "FROM ./base.gguf" "RUN exit 3"
    run "$MFC" build --progress plain "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"Modelfile:2: RUN exit 3: the command exited with status 3"* ]]
}

@test "--progress=plain numbers steps as mfc plan does; a local source shows its bytes in its step" {
    modelfile "FROM ./base.gguf" "ADAPTER ./lora.gguf" "SYSTEM hi"
    plan=$("$MFC" plan "$CTX" | awk '{print $1, $2}' | sort)
    run "$MFC" build --progress=plain "$CTX"
    [ "$status" -eq 0 ]
    # every begun step is "#N verb" exactly as the plan lists it, and ends once (lines
    # with bytes are a step's progress: a layer write of more than 2 s shows some)
    [ "$(grep -E '^#[0-9]+ ' <<<"$output" | grep -vE ' (DONE|CACHED) in ' |
         grep -vE ' [0-9.]+ (B|KiB|MiB|GiB)( / |$)' | awk '{print $1, $2}' | sort)" = "$plan" ]
    [ "$(ended DONE | wc -l)" -eq "$(wc -l <<<"$plan")" ]
    [[ "$output" == *"#1 source FROM ./base.gguf DONE in "*", "*"iB"* ]]
    ! grep -qE '^#[0-9]+ copy ' <<<"$output" # no separate job for the copy
    run "$MFC" build --progress=json "$CTX"
    [ "$status" -eq 0 ]
    [ "$(grep '"event": *"end"' <<<"$output" | jq -r '"#\(.step) \(.verb) \(.state)"' | sort | awk '{print $1, $2}' | tr '\n' '|')" = "$(tr '\n' '|' <<<"$plan")" ]
}

@test "a local base is not copied into the store: the layer is tarred from the file itself" {
    modelfile "FROM ./base.gguf" "SYSTEM hi"
    raw="sha256:$(sha256sum "$CTX/base.gguf" | cut -d' ' -f1)"
    run "$MFC" build -q -t one "$CTX"
    [ "$status" -eq 0 ]
    [ ! -e "$MFC_HOME/blobs/sha256/${raw#sha256:}" ]
    blobs_verify
    touch -d '2001-01-01' "$CTX/base.gguf" # same bytes, new mtime: re-hashed, same key
    run "$MFC" build --progress plain -t one "$CTX"
    [ "$status" -eq 0 ]
    [[ "$(ended CACHED)" == *"layer models/"* ]]
}

@test "a FROM whose architecture mfc does not run is refused at build time, naming the line and the architectures it runs" {
    "$MFC_BUILDDIR/tests/tools/mkmodel" -o "$CTX/q.gguf" --arch qwen3 --seed 3 >/dev/null
    python3 "$MFC_SRCDIR/tests/tools/gguf_edit.py" "$CTX/q.gguf" "$CTX/falcon.gguf" \
        --set general.architecture=str:falcon
    modelfile "SYSTEM x" "FROM ./falcon.gguf"
    run "$MFC" build --progress plain -t bad "$CTX"
    echo "$output"
    [ "$status" -eq 1 ]
    [[ "$output" == *"Modelfile:2: FROM ./falcon.gguf: "*"architecture 'falcon' is not supported (mfc runs llama, qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3)"* ]]
    [ -z "$(tags)" ]
    # every family it runs builds
    modelfile "FROM ./q.gguf"
    run "$MFC" build --progress plain -t good "$CTX"
    [ "$status" -eq 0 ]
    [ "$(tags)" = "good" ]
}

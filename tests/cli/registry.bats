#!/usr/bin/env bats
# registry.bats: mfc push / pull / login / logout against the Debian
# docker-registry (distribution 2.8) started here on 127.0.0.1 with htpasswd
# auth, checked with skopeo; plus a tiny Bearer-token registry (inline
# python) that answers every blob upload with 413.
load helpers
load registry_helpers

MKIMAGE="${MFC_BUILDDIR:-$BATS_TEST_DIRNAME/../..}/tests/tools/mkimage"
PW=s3cret-Pw-417

setup() {
    T="$BATS_TEST_TMPDIR"
    export MFC_HOME="$T/home" REGISTRY_AUTH_FILE="$T/auth.json" HOME="$T"
    head -c 300000 /dev/urandom >"$T/base.gguf"
    head -c 5000 /dev/urandom >"$T/lora.gguf"
    start_registry
}

teardown() {
    for f in "$T/registry.pid" "$T/bearer.pid"; do
        [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null
    done
    true
}

mk() { "$MKIMAGE" "$@" --runtime /bin/echo --weights "$T/base.gguf"; }
login() { echo "$PW" | "$MFC" login -u alice --password-stdin "$R"; }
# the store's tags and their targets, to prove a failure left them alone
tags() { jq -cS '[.manifests[] | {t: .annotations."org.opencontainers.image.ref.name", d: .digest}]' "$MFC_HOME/index.json"; }

@test "login, push, skopeo reads it back, pull into an empty store gives identical digests" {
    d=$(mk demo:1)
    run login
    [ "$status" -eq 0 ] && [[ "$output" == *"Login Succeeded"* ]]
    [ "$(stat -c %a "$T/auth.json")" = 600 ]
    run "$MFC" push demo:1 "$R/team/demo:v1"
    [ "$status" -eq 0 ]
    [[ "$output" == *"$d"* ]]
    [ "$(skopeo inspect --raw --tls-verify=false --creds "alice:$PW" "docker://$R/team/demo:v1" | sha256sum | cut -d' ' -f1)" = "${d#sha256:}" ]
    skopeo inspect --tls-verify=false --creds "alice:$PW" "docker://$R/team/demo:v1" | jq -e '(.Layers | length) == 3'
    export MFC_HOME="$T/home2"
    run "$MFC" pull "$R/team/demo:v1"
    [ "$status" -eq 0 ]
    [ "$("$MFC" inspect "$R/team/demo:v1" | jq -r .digest)" = "$d" ]
    # --progress=json: each blob's real bytes of its total, and its end
    w=$("$MFC" inspect "$R/team/demo:v1" | jq -r '.manifest.layers[1].digest')
    size=$("$MFC" inspect "$R/team/demo:v1" | jq -r '.manifest.layers[1].size')
    rm -rf "$T/home3"
    MFC_HOME="$T/home3" "$MFC" pull --progress=json "$R/team/demo:v1" 2>&1 >/dev/null | grep '^{' >"$T/pull.json"
    id=$(jq -r --arg n "${w:0:19}" 'select(.event == "begin" and .verb == "pull" and .name == $n) | .id' "$T/pull.json")
    [ -n "$id" ]
    jq -es --argjson id "$id" --argjson s "$size" 'map(select(.id == $id and .event == "end")) | .[0].done == $s' "$T/pull.json"
    MFC_HOME="$T/home3" "$MFC" push --progress=json "$R/team/demo:v1" "$R/team/demo:v3" 2>&1 >/dev/null | grep '^{' >"$T/push.json"
    [ "$(jq -r 'select(.event == "end") | .status' "$T/push.json" | sort -u)" = exists ]
    run "$MFC" login --help
    [[ "$output" == *'$DOCKER_CONFIG'* && "$output" == *'$REGISTRY_AUTH_FILE'* ]]
    MFC_HOME="$T/home" "$MFC" inspect demo:1 | jq -S '[.manifest.layers[].digest, .manifest.config.digest]' >"$T/a"
    "$MFC" inspect "$R/team/demo:v1" | jq -S '[.manifest.layers[].digest, .manifest.config.digest]' >"$T/b"
    cmp "$T/a" "$T/b"
    # credentials never appear in anything mfc printed or the auth file's plain text
    ! grep -rq -- "$PW" "$BATS_TEST_TMPDIR"/*.log "$T/auth.json" 2>/dev/null
    [[ "$output" != *"$PW"* ]]
    run "$MFC" logout "$R"
    [ "$status" -eq 0 ]
    [ "$(jq '.auths | length' "$T/auth.json")" = 0 ]
}

@test "a second image sharing the base uploads only its small layers; chunked uploads; mounts" {
    mk demo:1 >/dev/null
    mk demo:lora --adapter "$T/lora.gguf" >/dev/null
    login
    # chunks of 64 KiB: the 300 KB weight layer goes up in PATCHes
    MFC_PUSH_CHUNK_SIZE=65536 run "$MFC" push demo:1 "$R/team/demo:v1"
    [ "$status" -eq 0 ]
    [[ "$output" == *"4 uploaded"* ]]
    [[ "$output" =~ ([1-9][0-9]*)\ PATCH ]]
    run "$MFC" push demo:lora "$R/team/demo:lora"
    [ "$status" -eq 0 ]
    # config + adapter layer go up; weights, runtime and config layer are already there
    [[ "$output" == *"2 uploaded (2 PUT, 0 PATCH"* ]]
    [[ "$output" == *"3 present"* ]]
    w=$(skopeo inspect --raw --tls-verify=false --creds "alice:$PW" "docker://$R/team/demo:v1" | jq -r '.layers[1].digest')
    [ "$(skopeo inspect --raw --tls-verify=false --creds "alice:$PW" "docker://$R/team/demo:lora" | jq -r '.layers[1].digest')" = "$w" ]
    # another repository on the same registry: blobs are mounted, not uploaded
    run "$MFC" push demo:1 "$R/other/demo:v1"
    [ "$status" -eq 0 ]
    [[ "$output" == *"0 uploaded"* && "$output" == *"4 mounted"* ]]
    # the registry's access log agrees: one blob-bytes PUT for the lora image's 2 new blobs
    [ "$(grep -c 'PUT /v2/team/demo/blobs/uploads/' "$T/registry.log")" -eq 6 ]
}

@test "wrong credentials, an unreachable registry, a tampered blob: clear errors, store unchanged" {
    d=$(mk demo:1)
    login
    "$MFC" push demo:1 "$R/team/demo:v1" 2>/dev/null
    export REGISTRY_AUTH_FILE="$T/bad.json"
    echo "{\"auths\":{\"$R\":{\"auth\":\"$(printf 'alice:wrong' | base64)\"}}}" >"$T/bad.json"
    run "$MFC" push demo:1 "$R/team/demo:v2"
    [ "$status" -eq 1 ]
    [[ "$output" == *"authentication failed for $R (check mfc login)"* ]]
    [[ "$output" != *wrong* ]]
    run bash -c "echo wrong | '$MFC' login -u alice --password-stdin $R"
    [ "$status" -eq 1 ]
    [[ "$output" == *"login to $R failed: the registry refused the user name or password for 'alice'"* ]]
    [[ "$output" != *wrong* ]]
    [ "$(jq -r ".auths.\"$R\".auth" "$T/bad.json" | base64 -d)" = alice:wrong ]
    export REGISTRY_AUTH_FILE="$T/auth.json"
    before=$(tags)
    run "$MFC" pull "127.0.0.1:$(free_port)/team/demo:v1"
    [ "$status" -eq 1 ] && [[ "$output" == *"cannot reach the registry 127.0.0.1:"* ]]
    # tamper with the weight blob in the registry's storage (same size, other bytes)
    w=$(skopeo inspect --raw --tls-verify=false --creds "alice:$PW" "docker://$R/team/demo:v1" | jq -r '.layers[1].digest')
    f="$T/storage/docker/registry/v2/blobs/sha256/${w:7:2}/${w#sha256:}/data"
    printf 'XXXXXXXX' | dd of="$f" bs=1 seek=1000 conv=notrunc 2>/dev/null
    export MFC_HOME="$T/home2"
    "$MKIMAGE" keep:1 --runtime /bin/echo --weights "$T/lora.gguf" >/dev/null # not sharing w
    before=$(tags)
    run "$MFC" pull "$R/team/demo:v1"
    [ "$status" -eq 1 ]
    [[ "$output" == *"$w"* && "$output" == *"match"* ]]
    [ "$(tags)" = "$before" ]
    [ ! -e "$MFC_HOME/blobs/sha256/${w#sha256:}" ]
}

@test "a Bearer-token registry: token fetched with Basic creds; a 413 is a clear error" {
    mk demo:1 >/dev/null
    BPORT=$(free_port)
    echo "{\"auths\":{\"127.0.0.1:$BPORT\":{\"auth\":\"$(printf 'bob:tokpw' | base64)\"}}}" >"$T/auth.json"
    timeout 600 python3 - "$BPORT" "$T/bearer.log" <<'PY' &
import base64, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
port, log = int(sys.argv[1]), open(sys.argv[2], "a", buffering=1)
class H(BaseHTTPRequestHandler):
    def reply(self, code, body=b"", hdrs=()):
        self.send_response(code)
        for k, v in hdrs: self.send_header(k, v)
        self.send_header("Content-Length", str(len(body))); self.end_headers()
        if self.command != "HEAD": self.wfile.write(body)
    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n: self.rfile.read(n)
        a = self.headers.get("Authorization", "")
        log.write("%s %s %s\n" % (self.command, self.path, a.split(" ")[0]))
        if self.path.startswith("/token"):
            ok = a == "Basic " + base64.b64encode(b"bob:tokpw").decode() and "scope=repository%3Ateam%2Fdemo%3Apull%2Cpush" in self.path
            return self.reply(200, b'{"token":"tok-42"}') if ok else self.reply(401)
        if a != "Bearer tok-42":
            return self.reply(401, b"", [("WWW-Authenticate", 'Bearer realm="http://127.0.0.1:%d/token",service="reg"' % port)])
        if self.path == "/v2/": return self.reply(200, b"{}")
        if self.command == "HEAD": return self.reply(404)
        if self.command == "POST": return self.reply(202, b"", [("Location", "/v2/team/demo/blobs/uploads/u1")])
        return self.reply(413, b'{"errors":[{"code":"SIZE_INVALID","message":"too big"}]}')
    do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = handle_any
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", port), H).serve_forever()
PY
    echo $! >"$T/bearer.pid"
    for _ in $(seq 600); do curl -s -m 1 -o /dev/null "http://127.0.0.1:$BPORT/v2/" && break; sleep 0.1; done
    before=$(tags)
    run "$MFC" push demo:1 "127.0.0.1:$BPORT/team/demo:v1"
    [ "$status" -eq 1 ]
    [[ "$output" == *"refused blob sha256:"*"as too large (HTTP 413)"* ]]
    grep -q '^GET /token' "$T/bearer.log"
    grep -q 'Bearer$' "$T/bearer.log"
    [ "$(tags)" = "$before" ]
    [[ "$output" != *tokpw* && "$output" != *tok-42* ]]
}

@test "build --output type=registry pushes through mfc push's driver; a failed push moves no tag" {
    "$MFC_BUILDDIR/tests/tools/mkmodel" -o "$T/m.gguf" --preset toy --seed 1 >/dev/null
    printf '%s\n' "FROM ./m.gguf" "SYSTEM be brief" >"$T/Modelfile"
    login
    export MFC_SERVE=/bin/echo
    # name= wins over -t; stdout is the digest alone, the push line goes to stderr
    d=$("$MFC" build --progress=plain -t local:1 --output "type=registry,name=$R/team/built:v1" "$T" 2>"$T/err")
    [[ "$d" == sha256:* ]]
    grep -q "Pushed $R/team/built:v1 $d" "$T/err"
    grep -q "blobs: .* uploaded" "$T/err"
    [ "$(skopeo inspect --raw --tls-verify=false --creds "alice:$PW" "docker://$R/team/built:v1" | sha256sum | cut -d' ' -f1)" = "${d#sha256:}" ]
    [ "$("$MFC" inspect local:1 | jq -r .digest)" = "$d" ]
    # no name=: every -t is a registry reference; the layers are there already
    # (the image config differs: it records the first tag as the served name)
    run "$MFC" build -t "$R/team/built:v2" -t "$R/other/built:v2" --output type=registry "$T"
    [ "$status" -eq 0 ]
    d2=$(sed -n "s|.*Pushed $R/team/built:v2 \(sha256:[0-9a-f]*\).*|\1|p" <<<"$output" | head -1)
    [[ "$d2" == sha256:* && "$d2" != "$d" ]]
    [[ "$output" == *"Pushed $R/team/built:v2 $d2"* && "$output" == *"1 uploaded"* ]]
    [[ "$output" == *"Pushed $R/other/built:v2 $d2"* && "$output" == *"mounted"* ]]
    skopeo inspect --raw --tls-verify=false --creds "alice:$PW" "docker://$R/other/built:v2" >/dev/null
    # an unreachable registry fails the build and leaves the tags as they were
    before=$(tags)
    run "$MFC" build -t new:1 --output "type=registry,name=127.0.0.1:1/x/y:z" "$T"
    [ "$status" -eq 1 ]
    [[ "$output" == *"127.0.0.1:1"* ]]
    [ "$(tags)" = "$before" ]
    run "$MFC" build --output "type=registry,dest=$T/x" "$T"
    [ "$status" -eq 2 ]
    [[ "$output" == *"takes name=, not dest="* ]]
}

@test "mfc run of a registry reference that is not in the store pulls it first, with progress" {
    mkdir -p "$T/ctx"
    "$MFC_BUILDDIR/tests/tools/mkmodel" -o "$T/ctx/toy.gguf" --preset toy >/dev/null
    printf 'FROM ./toy.gguf\nPARAMETER temperature 0\nPARAMETER num_predict 4\n' >"$T/ctx/Modelfile"
    MFC_SERVE= "$MFC" build -q -t toy:1 "$T/ctx" >/dev/null
    login
    "$MFC" push -q toy:1 "$R/team/toy:v1" >/dev/null 2>&1
    export MFC_HOME="$T/home2"
    run "$MFC" run "$R/team/toy:v1" "hello"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"$R/team/toy:v1 is not in the store; pulling it from $R"* ]]
    [[ "$output" == *"pull sha256:"*" done "* ]]
    "$MFC" images | grep -q "$R/team/toy:v1"
    # the second run finds it: no pull
    run "$MFC" run "$R/team/toy:v1" "hello"
    [ "$status" -eq 0 ]
    [[ "$output" != *"pulling"* ]]
}

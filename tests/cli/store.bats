#!/usr/bin/env bats
# store.bats: the store as other OCI tools see it, and `mfc images`, `tag`,
# `rmi`, `prune` and `du`. Images are made by hand here (blobs written with
# sha256sum, index.json written directly), so these tests also check that mfc
# reads a layout another tool wrote. skopeo, when installed, reads ours.

load helpers

setup() {
    export MFC_HOME="$BATS_TEST_TMPDIR/store"
    "$MFC" du >/dev/null # creates the layout
}

# Writes stdin as a blob; prints its digest.
put_blob() {
    local tmp="$BATS_TEST_TMPDIR/blob.tmp"
    cat >"$tmp"
    local hex
    hex=$(sha256sum "$tmp" | cut -d' ' -f1)
    mv "$tmp" "$MFC_HOME/blobs/sha256/$hex"
    echo "sha256:$hex"
}

size_of() {
    stat -c %s "$MFC_HOME/blobs/sha256/${1#sha256:}"
}

# make_image TEXT: a minimal valid OCI image whose one layer (a real tar)
# holds hello.txt with TEXT. Sets LAYER, CONFIG, MANIFEST and IMAGE_BYTES.
make_image() {
    local d="$BATS_TEST_TMPDIR/rootfs"
    rm -rf "$d" && mkdir -p "$d" && echo "$1" >"$d/hello.txt"
    LAYER=$(tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - -C "$d" . | put_blob)
    CONFIG=$(printf '{"architecture":"amd64","os":"linux","config":{},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
        "$LAYER" | put_blob)
    MANIFEST=$(printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"%s","size":%d},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"%s","size":%d}]}' \
        "$CONFIG" "$(size_of "$CONFIG")" "$LAYER" "$(size_of "$LAYER")" | put_blob)
    IMAGE_BYTES=$(($(size_of "$LAYER") + $(size_of "$CONFIG") + $(size_of "$MANIFEST")))
}

# write_index TAG...: index.json tagging $MANIFEST with each TAG.
write_index() {
    local entries="" sep=""
    for t in "$@"; do
        entries="$entries$sep{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",\"digest\":\"$MANIFEST\",\"size\":$(size_of "$MANIFEST"),\"annotations\":{\"org.opencontainers.image.ref.name\":\"$t\",\"org.opencontainers.image.created\":\"2026-01-02T03:04:05Z\"}}"
        sep=,
    done
    echo "{\"schemaVersion\":2,\"manifests\":[$entries]}" >"$MFC_HOME/index.json"
}

@test "a new store is an OCI layout: oci-layout, index.json, blobs/sha256" {
    grep -q '"imageLayoutVersion":"1.0.0"' "$MFC_HOME/oci-layout"
    python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["schemaVersion"]==2 and d["manifests"]==[]' \
        "$MFC_HOME/index.json"
    [ -d "$MFC_HOME/blobs/sha256" ]
    run "$MFC" images
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 1 ]
    [[ "${lines[0]}" == "TAG"*"DIGEST"*"SIZE"*"CREATED" ]]
}

@test "without MFC_HOME the store is ~/.local/share/mfc" {
    unset MFC_HOME
    HOME="$BATS_TEST_TMPDIR/home" run "$MFC" images
    [ "$status" -eq 0 ]
    [ -f "$BATS_TEST_TMPDIR/home/.local/share/mfc/oci-layout" ]
}

@test "images lists tags with short digest, size and creation time" {
    make_image hi
    write_index demo
    run "$MFC" images
    [ "$status" -eq 0 ]
    [[ "${lines[1]}" == "demo  ${MANIFEST:7:12}"*"2026-01-02T03:04:05Z" ]]
    run "$MFC" images --json
    [ "$status" -eq 0 ]
    echo "$output" | python3 -c '
import json, sys
(img,) = json.load(sys.stdin)
assert img["tag"] == "demo" and img["digest"] == sys.argv[1], img
assert img["size"] == int(sys.argv[2]), img
' "$MANIFEST" "$IMAGE_BYTES"
}

@test "skopeo reads the store as an OCI layout (oci:\$MFC_HOME:TAG)" {
    command -v skopeo >/dev/null || skip "skopeo is not installed"
    make_image hi
    write_index demo
    "$MFC" tag demo llama3-lora:v1
    run skopeo inspect "oci:$MFC_HOME:llama3-lora:v1"
    [ "$status" -eq 0 ]
    echo "$output" | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["Digest"] == sys.argv[1] and d["Architecture"] == "amd64", d
assert d["Layers"] == [sys.argv[2]], d
' "$MANIFEST" "$LAYER"
}

@test "tag adds a name (from a tag or a digest); bad names and sources fail" {
    make_image hi
    write_index demo
    run "$MFC" tag demo demo:v2
    [ "$status" -eq 0 ]
    run "$MFC" tag "$MANIFEST" ns/other
    [ "$status" -eq 0 ]
    run "$MFC" images
    [ "${#lines[@]}" -eq 4 ]
    [[ "${lines[2]}" == "demo:v2 "* ]]
    [[ "${lines[3]}" == "ns/other "* ]]
    run "$MFC" tag nope x
    [ "$status" -eq 1 ]
    [[ "$output" == *"no image tagged nope"* ]]
    run "$MFC" tag demo 'bad name'
    [ "$status" -eq 2 ]
    run "$MFC" tag demo
    [ "$status" -eq 2 ]
}

@test "rmi untags; a missing name is reported and the others still go" {
    make_image hi
    write_index a b c
    run "$MFC" rmi a nope b
    [ "$status" -eq 1 ]
    [[ "$output" == *"Untagged: a"* ]]
    [[ "$output" == *"Untagged: b"* ]]
    [[ "$output" == *"no image tagged nope"* ]]
    run "$MFC" images
    [ "${#lines[@]}" -eq 2 ]
    [[ "${lines[1]}" == "c "* ]]
    [ -f "$MFC_HOME/blobs/sha256/${MANIFEST#sha256:}" ] # blobs stay until prune
    run "$MFC" rmi "$MANIFEST"
    [ "$status" -eq 0 ]
    [ "$output" = "Untagged: c" ]
}

@test "prune --dry-run reports, prune removes exactly the unreferenced blobs" {
    make_image hi
    write_index demo
    orphan=$(echo "nobody uses me" | put_blob)
    run "$MFC" prune --dry-run
    [ "$status" -eq 0 ]
    [[ "$output" == *"would remove blob $orphan (15 B)"* ]]
    [[ "${lines[-1]}" == "would free 15 B (15 bytes): 1 blobs"* ]]
    [ -f "$MFC_HOME/blobs/sha256/${orphan#sha256:}" ]
    run "$MFC" prune
    [ "$status" -eq 0 ]
    [[ "${lines[-1]}" == "freed 15 B (15 bytes): 1 blobs, 0 cache records, 0 tmp files" ]]
    [ ! -e "$MFC_HOME/blobs/sha256/${orphan#sha256:}" ]
    run "$MFC" images
    [ "${#lines[@]}" -eq 2 ]
    "$MFC" rmi demo
    run "$MFC" prune
    [ "$status" -eq 0 ]
    [[ "${lines[-1]}" == "freed "*"($IMAGE_BYTES bytes): 3 blobs"* ]]
    [ -z "$(ls "$MFC_HOME/blobs/sha256")" ]
}

@test "prune refuses while another mfc has the store open" {
    make_image hi
    # a process holding the shared lock every open store holds
    (exec 9<"$MFC_HOME/lock" && flock -s 9 && touch "$BATS_TEST_TMPDIR/held" && exec sleep 120) \
        >/dev/null 2>&1 3>&- &
    holder=$!
    for _ in $(seq 600); do [ -e "$BATS_TEST_TMPDIR/held" ] && break; sleep 0.1; done
    run "$MFC" prune
    kill "$holder"
    [ "$status" -eq 1 ]
    [[ "$output" == *"in use by another mfc process"* ]]
    [ -f "$MFC_HOME/blobs/sha256/${LAYER#sha256:}" ]
}

@test "du accounts referenced, unreferenced, cache and tmp bytes" {
    make_image hi
    write_index demo
    echo "nobody uses me" | put_blob >/dev/null
    echo "half a download" >"$MFC_HOME/tmp/partial-x"
    run "$MFC" du --json
    [ "$status" -eq 0 ]
    echo "$output" | python3 -c '
import json, sys
u = json.load(sys.stdin)
assert u["referenced"] == {"count": 3, "bytes": int(sys.argv[1])}, u
assert u["unreferenced"] == {"count": 1, "bytes": 15}, u
assert u["tmp"] == {"count": 1, "bytes": 16}, u
assert u["total"] == int(sys.argv[1]) + 31, u
' "$IMAGE_BYTES"
    run "$MFC" du
    [[ "$output" == *"blobs (unreferenced)"*"15"* ]]
}

@test "a corrupt index.json is reported and left exactly as it was" {
    echo '{"schemaVersion":2,"manifests":[{"digest":"sha256:XYZ"}' >"$MFC_HOME/index.json"
    cp "$MFC_HOME/index.json" "$BATS_TEST_TMPDIR/before"
    run "$MFC" images
    [ "$status" -eq 1 ]
    [[ "$output" == *"index.json"*"invalid JSON"*"left as it is"* ]]
    make_image hi
    run "$MFC" tag "$MANIFEST" x
    [ "$status" -eq 1 ]
    run "$MFC" prune
    [ "$status" -eq 1 ]
    cmp "$MFC_HOME/index.json" "$BATS_TEST_TMPDIR/before"
    echo '{"schemaVersion":2,"manifests":[{"mediaType":"a/b","digest":"sha256:XYZ","size":1}]}' \
        >"$MFC_HOME/index.json"
    run "$MFC" images
    [ "$status" -eq 1 ]
    [[ "$output" == *"manifests[0]"*"is not a digest"* ]]
}

@test "usage errors exit 2 and --help exits 0" {
    run "$MFC" prune extra
    [ "$status" -eq 2 ]
    run "$MFC" images --bogus
    [ "$status" -eq 2 ]
    run "$MFC" rmi
    [ "$status" -eq 2 ]
    run "$MFC" du --help
    [ "$status" -eq 0 ]
    [[ "$output" == "Usage: mfc du"* ]]
    run "$MFC" help prune
    [ "$status" -eq 0 ]
    [[ "$output" == *"--dry-run"* ]]
}

#!/usr/bin/env bats
# image.bats: images built through layer.h + oci.h (tests/tools/mkimage, as
# the executor's image node does), checked with real tools: skopeo reads the
# OCI dir, OCI tar and docker archive; umoci unpacks the rootfs; podman loads
# the docker archive, its image inspect shows mfc's config, and it runs the
# entrypoint; `mfc load` verifies and
# refuses bad archives, a docker manifest.json included (paths out of the
# archive, members it lacks, another image than index.json's). The "runtime" is /bin/echo (mfc-serve does not exist
# yet), so running the image prints the entrypoint's arguments.
load helpers

MKIMAGE="${MFC_BUILDDIR:-$BATS_TEST_DIRNAME/../..}/tests/tools/mkimage"

setup() {
    T="$BATS_TEST_TMPDIR"
    export MFC_HOME="$T/home"
    head -c 300000 /dev/urandom >"$T/base.gguf"
    head -c 5000 /dev/urandom >"$T/lora.gguf"
}

mk() { "$MKIMAGE" "$@" --runtime /bin/echo --weights "$T/base.gguf"; }

@test "equal inputs give equal image digests; a shared base shares the weight layer" {
    d1=$(mk demo:1)
    d2=$(mk demo:2)
    [ "$d1" = "$d2" ]
    d3=$(mk demo:lora --adapter "$T/lora.gguf")
    [ "$d3" != "$d1" ]
    "$MFC" inspect demo:1 >"$T/a.json"
    "$MFC" inspect demo:lora >"$T/b.json"
    w1=$(jq -r '.manifest.layers[] | select(.annotations."org.cncf.model.filepath"=="/models/base.gguf") | .digest' "$T/a.json")
    w2=$(jq -r '.manifest.layers[] | select(.annotations."org.cncf.model.filepath"=="/models/base.gguf") | .digest' "$T/b.json")
    [ -n "$w1" ] && [ "$w1" = "$w2" ]
    [ "$(jq -r '.manifest.layers[1].mediaType' "$T/a.json")" = application/vnd.oci.image.layer.v1.tar ]
    [ "$(jq -r '.config.config.ExposedPorts | keys[0]' "$T/a.json")" = 8080/tcp ]
    jq -e '.manifest.layers[] | select(.annotations."org.opencontainers.image.title"=="lora.gguf")' "$T/b.json"
}

@test "skopeo reads and copies the OCI dir, the OCI tar and the docker archive" {
    d=$(mk demo:1)
    "$MFC" save demo:1 -o "type=oci,dest=$T/odir"
    "$MFC" save demo:1 -o "type=oci,dest=$T/o.tar"
    "$MFC" save demo:1 -o "$T/d.tar"
    [ "$(skopeo inspect --raw "oci:$T/odir:demo:1" | sha256sum | cut -d' ' -f1)" = "${d#sha256:}" ]
    [ "$(skopeo inspect --raw "oci-archive:$T/o.tar" | sha256sum | cut -d' ' -f1)" = "${d#sha256:}" ]
    skopeo inspect "docker-archive:$T/d.tar" | jq -e '.Architecture == "amd64" and (.Layers | length) == 3'
    skopeo inspect "oci:$T/odir:demo:1" | jq -e '.Labels."org.opencontainers.image.title" == "mfc-test"'
    for src in "oci:$T/odir:demo:1" "oci-archive:$T/o.tar" "docker-archive:$T/d.tar"; do
        rm -rf "$T/copy"
        skopeo copy -q "$src" "oci:$T/copy:x"
        skopeo inspect "oci:$T/copy:x" | jq -e '(.Layers | length) == 3'
    done
    # the same image saved twice gives the same archive bytes
    "$MFC" save demo:1 -o "$T/d2.tar"
    cmp "$T/d.tar" "$T/d2.tar"
}

@test "umoci unpack gives the expected rootfs" {
    # Debian 12's umoci (0.4.7) refuses tar+zstd layers: the runtime layer as
    # gzip, as for Docker before 23.0 (docs/image.md, "Compression")
    MFC_RUNTIME_COMPRESSION=gzip mk demo:1 --adapter "$T/lora.gguf" >/dev/null
    jq -e '.manifest.layers[0].mediaType | endswith("tar+gzip")' <("$MFC" inspect demo:1)
    "$MFC" save demo:1 -o "type=oci,dest=$T/odir"
    umoci unpack --rootless --image "$T/odir:demo:1" "$T/bundle"
    r="$T/bundle/rootfs"
    cmp "$r/models/base.gguf" "$T/base.gguf"
    cmp "$r/adapters/lora.gguf" "$T/lora.gguf"
    cmp "$r/usr/bin/mfc-serve" /bin/echo
    [ -x "$r/usr/bin/mfc-serve" ]
    grep -q 'model: m' "$r/etc/mfc/model.yaml"
    # the loader named in the binary's PT_INTERP is in the image
    interp=$(readelf -l /bin/echo | sed -n 's/.*interpreter: \(.*\)]/\1/p')
    [ -f "$r$interp" ]
    jq -e '.process.args == ["/usr/bin/mfc-serve","--config","/etc/mfc/model.yaml"]' "$T/bundle/config.json"
}

@test "mfc load reproduces the image in an empty store; mfc inspect shows it" {
    d=$(mk demo:1)
    "$MFC" save demo:1 --name example.com/m/demo:v1 -o "$T/d.tar"
    export MFC_HOME="$T/home2"
    run "$MFC" load -i "$T/d.tar"
    [ "$status" -eq 0 ]
    [[ "$output" == *"Loaded 1 image"* ]]
    [ "$("$MFC" inspect example.com/m/demo:v1 | jq -r .digest)" = "$d" ]
    "$MFC" save demo:1 -o "type=oci,dest=$T/o.tar" 2>/dev/null && false
    "$MFC" load -i "$T/d.tar" -t other
    [ "$("$MFC" inspect other | jq -r .digest)" = "$d" ]
}

@test "mfc load refuses unsafe and corrupted archives and leaves the tags alone" {
    mk demo:1 >/dev/null
    "$MFC" save demo:1 -o "$T/d.tar"
    export MFC_HOME="$T/home2"
    mkdir -p "$T/x" && tar -C "$T/x" -xf "$T/d.tar"
    # a weight blob whose bytes do not match its name
    big=$(ls -S "$T/x/blobs/sha256" | head -1)
    printf 'X' | dd of="$T/x/blobs/sha256/$big" bs=1 seek=1000 conv=notrunc 2>/dev/null
    tar -C "$T/x" -cf "$T/bad.tar" oci-layout index.json blobs
    run "$MFC" load -i "$T/bad.tar"
    [ "$status" -eq 1 ]
    [[ "$output" == *"sha256:$big"* ]]
    # a member escaping the archive
    python3 -c '
import tarfile, io, sys
with tarfile.open(sys.argv[1], "w") as t:
    i = tarfile.TarInfo("../evil"); i.size = 1; t.addfile(i, io.BytesIO(b"x"))' "$T/evil.tar"
    run "$MFC" load -i "$T/evil.tar"
    [ "$status" -eq 1 ]
    [[ "$output" == *"not a safe relative path"* ]]
    [ ! -e "$T/evil" ]
    # a plain tar with no layout
    run "$MFC" load -i "$T/evil.tar"
    run "$MFC" images --json
    [ "$output" = "[]" ]
}

@test "mfc load checks a docker archive's manifest.json as it checks the index: no path escapes, every member present, the index's images" {
    mk demo:1 >/dev/null
    "$MFC" save demo:1 -o "type=docker,dest=$T/d.tar"
    export MFC_HOME="$T/home2"
    mkdir -p "$T/x" && tar -C "$T/x" -xf "$T/d.tar"
    cp "$T/x/manifest.json" "$T/good.json"
    # edit EXPR: manifest.json rewritten by a jq expression, archived again, loaded
    edit() {
        jq -c "$1" "$T/good.json" >"$T/x/manifest.json"
        tar -C "$T/x" -cf "$T/bad.tar" .
        run "$MFC" load -i "$T/bad.tar"
    }
    edit '.[0].Config = "../../etc/passwd"'
    [ "$status" -eq 1 ]
    [[ "$output" == *"manifest.json: entry 1: Config '../../etc/passwd' is not a safe relative path inside the archive"* ]]
    edit '.[0].Layers[0] = "/etc/passwd"'
    [ "$status" -eq 1 ]
    [[ "$output" == *"Layers[0] '/etc/passwd' is not a safe relative path"* ]]
    edit '.[0].Layers[1] = "blobs/sha256/'"$(printf '0%.0s' $(seq 64))"'"'
    [ "$status" -eq 1 ]
    [[ "$output" == *"Layers[1] 'blobs/sha256/000"*"is not in the archive"* ]]
    edit '.[0].Config = .[0].Layers[0]' # a member, but not this image's config
    [ "$status" -eq 1 ]
    [[ "$output" == *"its Config is not the config of any image in index.json"* ]]
    edit '.[0].Layers |= reverse'
    [ "$status" -eq 1 ]
    [[ "$output" == *"Layers[0] is not layer 1"* ]]
    edit '.[0].Layers |= .[1:]'
    [ "$status" -eq 1 ]
    [[ "$output" == *"Layers must list the image's"* ]]
    edit '. + .'
    [ "$status" -eq 1 ]
    [[ "$output" == *"manifest.json lists 2 images, index.json 1"* ]]
    edit '{"not": "a list"}'
    [ "$status" -eq 1 ]
    # nothing was tagged by any of them
    run "$MFC" images --json
    [ "$output" = "[]" ]
    # the archive as mfc wrote it loads
    cp "$T/good.json" "$T/x/manifest.json"
    tar -C "$T/x" -cf "$T/ok.tar" .
    "$MFC" load -i "$T/ok.tar"
    "$MFC" inspect demo:1 >/dev/null
}

@test "podman loads the docker archive and runs the entrypoint" {
    command -v podman || { echo "podman is not installed (script/bootstrap installs it)"; false; }
    mk demo:1 >/dev/null
    # the runtime layer is tar+zstd (the default): podman reads it
    jq -e '.manifest.layers[0].mediaType | endswith("tar+zstd")' <("$MFC" inspect demo:1)
    "$MFC" save demo:1 --name mfc-test/demo:1 -o "$T/d.tar"
    P=(podman --root "$T/podman" --runroot "$T/podman-run" --storage-driver=vfs
       --runtime runc --cgroup-manager=cgroupfs --events-backend=none)
    timeout 120 "${P[@]}" load -i "$T/d.tar"
    # podman read the image config mfc wrote: its image ID is the config's
    # digest, and entrypoint, env, labels and ports are the ones mfc set
    "$MFC" inspect demo:1 >"$T/mfc.json"
    "${P[@]}" image inspect docker.io/mfc-test/demo:1 >"$T/podman.json"
    [ "$(jq -r '.[0].Id' "$T/podman.json")" = "$(jq -r '.manifest.config.digest | ltrimstr("sha256:")' "$T/mfc.json")" ]
    jq -e '.[0].Config.Entrypoint == ["/usr/bin/mfc-serve", "--config", "/etc/mfc/model.yaml"]' "$T/podman.json"
    jq -e '.[0].Config.Env | index("MFC_PORT=8080")' "$T/podman.json"
    jq -e '.[0].Config.Labels."org.opencontainers.image.title" == "mfc-test"' "$T/podman.json"
    jq -e '.[0].Config.Labels."io.mfc.adapters" == "none"' "$T/podman.json"
    jq -e '.[0].Config.ExposedPorts | has("8080/tcp")' "$T/podman.json"
    [ "$(jq -c '.[0].Config.Labels' "$T/podman.json")" = "$(jq -c '.config.config.Labels' "$T/mfc.json")" ]
    # this machine has no CAP_SYS_RESOURCE: podman's default rlimits (raised
    # above the host's) fail in runc, so ask for low ones explicitly
    run timeout 120 "${P[@]}" run --rm --network=none --ulimit nofile=1024:1024 \
        --ulimit nproc=1024:1024 docker.io/mfc-test/demo:1 hello
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"--config /etc/mfc/model.yaml hello"* ]]
    "${P[@]}" rmi -a -f >/dev/null 2>&1 || true
}

@test "a weight blob of 64 MiB or more starts on a 512 KiB boundary of both archives, which skopeo, podman, GNU tar, Python and mfc load read" {
    # layer_pax.c: a pax "comment" record pads the header so the kernel copy
    # lands congruent to the source; every reader must skip it
    head -c $((70 << 20)) /dev/urandom >"$T/base.gguf"
    d=$(mk big:1)
    "$MFC" save big:1 --name mfc-test/big:1 -o "$T/d.tar"
    "$MFC" save big:1 -o "type=oci,dest=$T/o.tar"
    w=$("$MFC" inspect big:1 | jq -r '.manifest.layers[] | select(.annotations."org.cncf.model.filepath"=="/models/base.gguf") | .digest')
    for a in "$T/d.tar" "$T/o.tar"; do
        python3 - "$a" "${w#sha256:}" <<'PY'
import hashlib, sys, tarfile
path, hexd = sys.argv[1], sys.argv[2]
with tarfile.open(path) as t:
    m = t.getmember("blobs/sha256/" + hexd)
    assert m.offset_data % (512 << 10) == 0, m.offset_data
    assert "comment" in m.pax_headers, m.pax_headers
    h = hashlib.sha256()
    f = t.extractfile(m)
    for b in iter(lambda: f.read(1 << 20), b""):
        h.update(b)
    assert h.hexdigest() == hexd
    for m in t.getmembers():  # every other blob is whole too
        if m.name.startswith("blobs/sha256/") and m.isfile():
            assert hashlib.sha256(t.extractfile(m).read()).hexdigest() == m.name[13:], m.name
PY
        rm -rf "$T/x" && mkdir "$T/x"
        tar -C "$T/x" -xf "$a"
        [ "$(sha256sum <"$T/x/blobs/sha256/${w#sha256:}" | cut -d' ' -f1)" = "${w#sha256:}" ]
        [ "$(tar -tf "$a" | grep -c PaxHeader)" -eq 0 ]
    done
    [ "$(skopeo inspect --raw "oci-archive:$T/o.tar" | sha256sum | cut -d' ' -f1)" = "${d#sha256:}" ]
    # dir: keeps each blob as it is (oci: would gzip the docker archive's layers)
    skopeo copy -q "docker-archive:$T/d.tar" "dir:$T/copy"
    [ "$(sha256sum <"$T/copy/${w#sha256:}" | cut -d' ' -f1)" = "${w#sha256:}" ]
    command -v podman || { echo "podman is not installed (script/bootstrap installs it)"; false; }
    P=(podman --root "$T/podman" --runroot "$T/podman-run" --storage-driver=vfs
       --runtime runc --cgroup-manager=cgroupfs --events-backend=none)
    timeout 300 "${P[@]}" load -i "$T/d.tar"
    [ "$("${P[@]}" image inspect docker.io/mfc-test/big:1 | jq -r '.[0].Id')" = \
      "$("$MFC" inspect big:1 | jq -r '.manifest.config.digest | ltrimstr("sha256:")')" ]
    "${P[@]}" rmi -a -f >/dev/null 2>&1 || true
    export MFC_HOME="$T/home2"
    "$MFC" load -i "$T/d.tar"
    [ "$("$MFC" inspect docker.io/mfc-test/big:1 | jq -r .digest)" = "$d" ]
}

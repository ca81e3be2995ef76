#!/usr/bin/env bats
# build-image.bats: `mfc build` makes a real, runnable OCI image (the layer
# and image nodes through layer.h + oci.h), checked with real tools: digests
# are reproducible and a shared base shares its weight layer; skopeo reads the
# labels and config from the store; umoci unpacks a `--output type=oci` dir
# into the expected rootfs and model.yaml; podman runs the entrypoint of a
# `--output type=docker` archive. mfc-serve does not exist yet, so the
# runtime is /bin/echo (MFC_SERVE); running the image prints its arguments.
# Models and adapters come from mkmodel. Each test has its own store.

load helpers

setup_file() {
    export DATA="$BATS_FILE_TMPDIR/data"
    mkdir -p "$DATA"
    MKMODEL="$MFC_BUILDDIR/tests/tools/mkmodel"
    "$MKMODEL" -o "$DATA/base.gguf" --preset toy --seed 1 >/dev/null
    "$MKMODEL" -o "$DATA/lora.gguf" --preset toy --lora 4 --targets q,v >/dev/null
    "$MKMODEL" -o "$DATA/lora2.gguf" --preset toy --lora 2 --targets q --seed 3 >/dev/null
}

setup() {
    T="$BATS_TEST_TMPDIR"
    export MFC_HOME="$T/store" MFC_SERVE=/bin/echo
    CTX="$T/ctx"
    mkdir -p "$CTX"
    cp "$DATA"/*.gguf "$CTX/"
    printf '%s\n' "FROM ./base.gguf" "ADAPTER --name=sql ./lora.gguf" "ADAPTER ./lora2.gguf" \
        "PARAMETER temperature 0.5" "SYSTEM be brief" "LICENSE MIT" \
        "LABEL org.opencontainers.image.version=1.2 org.opencontainers.image.source=https://example.com/m" \
        "ENV MFC_PORT=9000 FOO=bar" >"$CTX/Modelfile"
}

# The digest of the layer an image has at /PATH.
layer_at() {
    "$MFC" inspect "$1" | jq -r --arg p "$2" \
        '.manifest.layers[] | select(.annotations."org.cncf.model.filepath" == $p) | .digest'
}

@test "equal builds give equal image digests; an unchanged rebuild is all CACHED" {
    d1=$("$MFC" build -q -t m:1 "$CTX")
    run "$MFC" build --progress plain -t m:1 "$CTX"
    [ "$status" -eq 0 ]
    [ "${lines[-1]}" = "$d1" ]
    [ "$(grep -c ' CACHED in ' <<<"$output")" -eq 12 ]
    ! grep -q ' DONE in ' <<<"$output"
    # not only the cache: running every step again writes the same bytes
    [ "$("$MFC" build -q --no-cache -t m:1 "$CTX")" = "$d1" ]
    # another first tag is another served name (MFC_MODEL_NAME): the same layers, another config
    d2=$("$MFC" build -q -t m:2 "$CTX")
    [ "$d2" != "$d1" ]
    [ "$("$MFC" inspect m:1 | jq -c '[.manifest.layers[].digest]')" = \
      "$("$MFC" inspect m:2 | jq -c '[.manifest.layers[].digest]')" ]
    # a new runtime re-runs only the image step
    cp /bin/echo "$T/serve" && printf 'x' >>"$T/serve"
    run env MFC_SERVE="$T/serve" "$MFC" build --progress plain -t m:1 "$CTX"
    [ "$status" -eq 0 ]
    [ "$(grep ' DONE in ' <<<"$output" | sed 's/ DONE in .*//')" = "#12 image image" ]
    [ "${lines[-1]}" != "$d1" ]
}

@test "two Modelfiles sharing a base share the weight layer" {
    "$MFC" build -q -t a "$CTX" >/dev/null
    mkdir -p "$T/other"
    cp "$DATA/base.gguf" "$T/other/weights.gguf"
    printf '%s\n' "FROM ./weights.gguf" "SYSTEM something else" >"$T/other/Modelfile"
    "$MFC" build -q -t b "$T/other" >/dev/null
    wa=$(layer_at a /models/model.gguf)
    [ -n "$wa" ] && [ "$wa" = "$(layer_at b /models/model.gguf)" ]
    [ "$(layer_at a /etc/mfc/model.yaml)" != "$(layer_at b /etc/mfc/model.yaml)" ]
    # the runtime is zstd'd, weights and adapters are plain tar (never compressed), the
    # config gzip'd
    "$MFC" inspect a | jq -e '[.manifest.layers[].mediaType] == [
        "application/vnd.oci.image.layer.v1.tar+zstd", "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.layer.v1.tar", "application/vnd.oci.image.layer.v1.tar",
        "application/vnd.oci.image.layer.v1.tar+gzip"]'
}

@test "skopeo inspect of the store shows the labels and the config" {
    "$MFC" build -q -t demo:1 "$CTX" >/dev/null
    skopeo inspect "oci:$MFC_HOME:demo:1" >"$T/i.json"
    jq -e '.Labels == {
        "org.opencontainers.image.created": "1970-01-01T00:00:00Z",
        "org.opencontainers.image.title": "mkmodel-toy",
        "org.opencontainers.image.licenses": "MIT",
        "org.opencontainers.image.version": "1.2",
        "org.opencontainers.image.source": "https://example.com/m",
        "dev.mfc.runtime": "cpu",
        "dev.mfc.architecture": "llama",
        "dev.mfc.parameters": "1443072",
        "dev.mfc.quantization": "F32",
        "dev.mfc.context_length": "512",
        "dev.mfc.adapters": "sql,lora2"}' "$T/i.json"
    jq -e '(.Layers | length) == 5 and .Architecture == "amd64"' "$T/i.json"
    skopeo inspect --config "oci:$MFC_HOME:demo:1" >"$T/c.json"
    jq -e '.config.Entrypoint == ["/usr/bin/mfc-serve", "--config", "/etc/mfc/model.yaml"]' "$T/c.json"
    jq -e '.config.ExposedPorts == {"8080/tcp": {}}' "$T/c.json"
    # ENV wins over the default MFC_PORT; PATH and MFC_CONFIG stay
    jq -e '.config.Env == ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "MFC_CONFIG=/etc/mfc/model.yaml", "MFC_MODEL_NAME=demo:1", "MFC_PORT=9000", "FOO=bar"]' "$T/c.json"
    jq -e '[.history[].created_by] == ["COPY mfc-serve /usr/bin/mfc-serve",
        "Modelfile:1: FROM ./base.gguf", "Modelfile:2: ADAPTER ./lora.gguf",
        "Modelfile:3: ADAPTER ./lora2.gguf",
        "Modelfile: PARAMETER, TEMPLATE, SYSTEM, ... -> /etc/mfc/model.yaml"]' "$T/c.json"
}

@test "umoci unpacks --output type=oci,dest=DIR into the model, adapters and model.yaml" {
    # Debian 12's umoci (0.4.7) refuses tar+zstd layers: the runtime as gzip
    MFC_RUNTIME_COMPRESSION=gzip run "$MFC" build -t demo:1 --output "type=oci,dest=$T/odir" "$CTX"
    [ "$status" -eq 0 ]
    [ -z "$(ls -d "$T"/odir.tmp-* 2>/dev/null)" ]
    umoci unpack --rootless --image "$T/odir:demo:1" "$T/bundle"
    r="$T/bundle/rootfs"
    cmp "$r/models/model.gguf" "$DATA/base.gguf"
    cmp "$r/adapters/sql.gguf" "$DATA/lora.gguf"
    cmp "$r/adapters/lora2.gguf" "$DATA/lora2.gguf"
    cmp "$r/usr/bin/mfc-serve" /bin/echo
    python3 -c '
import json, sys, yaml
print(json.dumps(yaml.safe_load(open(sys.argv[1]))))' "$r/etc/mfc/model.yaml" >"$T/y.json"
    jq -e '.model.path == "/models/model.gguf"' "$T/y.json"
    jq -e '.adapters == [{"name": "sql", "scale": 1.0, "path": "/adapters/sql.gguf"},
                         {"name": "lora2", "scale": 1.0, "path": "/adapters/lora2.gguf"}]' "$T/y.json"
    jq -e '.system == "be brief" and .params.temperature == 0.5 and .license == ["MIT"]' "$T/y.json"
    # every path the YAML names is in the image
    for p in $(jq -r '.model.path, .adapters[].path' "$T/y.json"); do [ -f "$r$p" ]; done
    jq -e '.process.args == ["/usr/bin/mfc-serve","--config","/etc/mfc/model.yaml"]' "$T/bundle/config.json"
    # an OCI tar of the same image holds the same manifest
    d=$("$MFC" build -q --output "type=oci,dest=$T/o.tar" "$CTX")
    [ "$(skopeo inspect --raw "oci-archive:$T/o.tar" | sha256sum | cut -d' ' -f1)" = "${d#sha256:}" ]
}

@test "without a runtime the image has no runtime layer, a warning, and the entrypoint" {
    MFC_SERVE= run "$MFC" build --progress plain -t bare "$CTX"
    [ "$status" -eq 0 ]
    [ "$(grep -c 'warning: no mfc-serve found; the image has no runtime yet' <<<"$output")" -eq 1 ]
    "$MFC" inspect bare | jq -e '(.manifest.layers | length) == 4'
    "$MFC" inspect bare | jq -e '.config.config.Entrypoint[0] == "/usr/bin/mfc-serve"'
    # mfc-serve next to the mfc binary is found without MFC_SERVE
    mkdir -p "$T/bin"
    cp "$MFC" "$T/bin/mfc" && cp /bin/echo "$T/bin/mfc-serve"
    env -u MFC_SERVE "$T/bin/mfc" build -q -t beside "$CTX" >/dev/null
    "$MFC" inspect beside | jq -e '(.manifest.layers | length) == 5'
    # a MFC_SERVE that names nothing is an error, not a silent bare image
    MFC_SERVE="$T/nope" run "$MFC" build -q -t typo "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"MFC_SERVE=$T/nope is not an executable file"* ]]
    ! "$MFC" images | grep -q typo
}

@test "--output failures give clear errors and leave no destination and no tag" {
    run "$MFC" build -t x --output "type=bogus,dest=$T/o" "$CTX"
    [ "$status" -eq 2 ]
    [[ "$output" == *"--output"* ]]
    run "$MFC" build --output "type=docker,dest=$T/d.tar" "$CTX"
    [ "$status" -eq 2 ]
    [[ "$output" == *"type=docker needs a -t NAME"* ]]
    run "$MFC" build --output type=registry "$CTX"
    [ "$status" -eq 2 ]
    [[ "$output" == *"type=registry needs name=REF or a -t"* ]]
    [ ! -e "$MFC_HOME" ]
    # a destination under a regular file cannot be written, as a dir or a tar
    : >"$T/file"
    run "$MFC" build -t x --output "type=oci,dest=$T/file/odir" "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"$T/file/odir"* ]]
    run "$MFC" build -t x --output "type=docker,dest=$T/file/d.tar" "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"$T/file/d.tar"* ]]
    [ -f "$T/file" ] && [ ! -s "$T/file" ]
    [ -z "$(ls -A "$T" | grep -v -e '^ctx$' -e '^store$' -e '^file$')" ]
    ! "$MFC" images | grep -q '^x '
    # the store is fine: the same build with a good destination succeeds
    run "$MFC" build -q -t x --output "type=docker,dest=$T/d.tar" "$CTX"
    [ "$status" -eq 0 ]
    tar -tf "$T/d.tar" | grep -qx manifest.json
}

@test "podman loads a --output type=docker archive and runs the image's entrypoint" {
    command -v podman || { echo "podman is not installed (script/bootstrap installs it)"; false; }
    "$MFC" build -q -t mfc-test/built:1 --output "type=docker,dest=$T/d.tar" "$CTX" >/dev/null
    P=(podman --root "$T/podman" --runroot "$T/podman-run" --storage-driver=vfs
       --runtime runc --cgroup-manager=cgroupfs --events-backend=none)
    timeout 120 "${P[@]}" load -i "$T/d.tar"
    # no CAP_SYS_RESOURCE here: ask for rlimits below the host's (image.bats)
    run timeout 120 "${P[@]}" run --rm --network=none --ulimit nofile=1024:1024 \
        --ulimit nproc=1024:1024 docker.io/mfc-test/built:1 hello
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"--config /etc/mfc/model.yaml hello"* ]]
    "${P[@]}" rmi -a -f >/dev/null 2>&1 || true
}

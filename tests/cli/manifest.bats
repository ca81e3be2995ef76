#!/usr/bin/env bats
# manifest.bats: `mfc manifest IMAGE --kubernetes|--compose` prints YAML that
# PyYAML reads back (tests/cli/yaml_check.py) with what the image's config
# says (port, Env) and what deployment needs (GPU, /health probes, Prometheus
# annotations); the examples in docker/ parse and say the same things.
# docker-compose validates the Compose output against its schema, and
# `podman kube play` runs the Kubernetes output (parsed into Kubernetes' own
# Go types) with the real mfc-serve, which then answers /health and /metrics.
# The images are built from a mkmodel toy: with MFC_SERVE=/bin/echo and
# ENV MFC_PORT=9000 FOO=bar for the document checks, with mfc-serve for the run.

load helpers

setup_file() {
    export DATA="$BATS_FILE_TMPDIR/data" MFC_HOME="$BATS_FILE_TMPDIR/store" MFC_SERVE=/bin/echo
    mkdir -p "$DATA"
    "$MFC_BUILDDIR/tests/tools/mkmodel" -o "$DATA/base.gguf" --preset toy --seed 1 >/dev/null
    printf '%s\n' "FROM ./base.gguf" "ENV MFC_PORT=9000 FOO=bar EMPTY=" >"$DATA/Modelfile"
    "$MFC" build -q -t Team/Llama3_SQL:1 "$DATA" >"$DATA/digest"
}

teardown() {
    if [ -d "$BATS_TEST_TMPDIR/podman" ]; then
        podman --root "$BATS_TEST_TMPDIR/podman" --runroot "$BATS_TEST_TMPDIR/podman-run" \
            --storage-driver=vfs --runtime runc --cgroup-manager=cgroupfs \
            --events-backend=none pod rm -af -t 0 >/dev/null 2>&1
    fi
    true
}

Y() { python3 "$MFC_SRCDIR/tests/cli/yaml_check.py" "$@"; }

@test "manifest --kubernetes: a Deployment and a Service for the image, from its config" {
    "$MFC" manifest --kubernetes Team/Llama3_SQL:1 >"$BATS_TEST_TMPDIR/k.yaml" 2>"$BATS_TEST_TMPDIR/err"
    # a local name: said on stderr, since a cluster cannot pull it
    grep -q "'Team/Llama3_SQL:1' is a local name a cluster cannot pull" "$BATS_TEST_TMPDIR/err"
    Y "$BATS_TEST_TMPDIR/k.yaml" >"$BATS_TEST_TMPDIR/k.json"
    cd "$BATS_TEST_TMPDIR"
    jq -e 'length == 2 and .[0].kind == "Deployment" and .[0].apiVersion == "apps/v1"
           and .[1].kind == "Service" and .[1].apiVersion == "v1"' k.json
    # the name comes from the reference; labels select the pods
    jq -e '.[0].metadata.name == "llama3-sql" and .[1].metadata.name == "llama3-sql"
           and .[0].spec.selector.matchLabels == .[0].spec.template.metadata.labels
           and .[1].spec.selector == .[0].spec.selector.matchLabels' k.json
    local c='.[0].spec.template.spec.containers[0]'
    jq -e "$c.image == \"Team/Llama3_SQL:1\" and $c.ports[0].containerPort == 9000" k.json
    # the runtime (/bin/echo here) is no CUDA build: no GPU; CPU and memory from the model's size
    jq -e "($c.resources.limits | has(\"nvidia.com/gpu\") | not)" k.json
    jq -e "$c.resources.requests.cpu == \"1\" and $c.resources.requests.memory == \"768Mi\"
           and $c.resources.limits.memory == \"768Mi\"" k.json
    for p in startupProbe readinessProbe livenessProbe; do
        jq -e "$c.$p.httpGet.path == \"/health\" and $c.$p.httpGet.port == \"http\"" k.json
    done
    # Env from the image, less PATH; "9000" stays a string (Kubernetes requires it)
    jq -e "[$c.env[] | \"\\(.name)=\\(.value)\"] ==
           [\"MFC_CONFIG=/etc/mfc/model.yaml\", \"MFC_MODEL_NAME=Team/Llama3_SQL:1\",
            \"MFC_PORT=9000\", \"FOO=bar\", \"EMPTY=\"]" k.json
    jq -e '.[0].spec.template.metadata.annotations as $a |
           $a."prometheus.io/scrape" == "true" and $a."prometheus.io/port" == "9000"
           and $a."prometheus.io/path" == "/metrics"' k.json
    jq -e --arg d "$(cat "$DATA/digest")" \
        '.[0].spec.template.metadata.annotations."dev.mfc.image.digest" == $d' k.json
    jq -e '.[1].spec.ports[0] == {"name":"http","port":9000,"targetPort":"http","protocol":"TCP"}
           and .[1].metadata.annotations."prometheus.io/scrape" == "true"' k.json
    # the same bytes every time
    [ "$("$MFC" manifest -k Team/Llama3_SQL:1 2>/dev/null)" = "$(cat k.yaml)" ]
    # once the image has a registry name (mfc push records it as a tag), that name pinned
    # by digest is what the cluster pulls, and nothing is said
    "$MFC" tag Team/Llama3_SQL:1 registry.example.com/team/sql:1
    "$MFC" manifest -k Team/Llama3_SQL:1 2>err2 | Y >k2.json
    [ ! -s err2 ]
    jq -e --arg d "$(cat "$DATA/digest")" "$c.image == \"registry.example.com/team/sql@\" + \$d" k2.json
    "$MFC" rmi registry.example.com/team/sql:1 >/dev/null
}

@test "manifest asks for a GPU when the image's runtime is a CUDA build" {
    export MFC_SERVE="$MFC_BUILDDIR/mfc-serve"
    "$MFC" build -q -t real:1 "$DATA" >/dev/null
    "$MFC" manifest -k --image r.example.com/real:1 real:1 | Y >"$BATS_TEST_TMPDIR/k.json"
    local c='.[0].spec.template.spec.containers[0]' want=0 label=cpu
    if ldd "$MFC_SERVE" | grep -q libcudart; then want=1 label=cuda; fi
    [ "$("$MFC" inspect real:1 | jq -r '.config.config.Labels."dev.mfc.runtime"')" = "$label" ]
    jq -e --argjson n "$want" "($c.resources.limits.\"nvidia.com/gpu\" // 0) == \$n" "$BATS_TEST_TMPDIR/k.json"
    "$MFC" manifest -k --gpus 3 --image r.example.com/real:1 real:1 | Y |
        jq -e "$c.resources.limits.\"nvidia.com/gpu\" == 3"
}

@test "manifest --compose: --port, --gpus, --image and --name go where they belong" {
    run "$MFC" manifest --compose --port 8081 --gpus 2 --name sql \
        --image registry.example.com/team/sql:1 Team/Llama3_SQL:1
    [ "$status" -eq 0 ]
    echo "$output" | Y >"$BATS_TEST_TMPDIR/c.json"
    cd "$BATS_TEST_TMPDIR"
    jq -e 'length == 1 and (.[0].services | keys) == ["sql"]' c.json
    local s='.[0].services.sql'
    jq -e "$s.image == \"registry.example.com/team/sql:1\" and $s.ports == [\"8081:8081\"]" c.json
    jq -e "$s.environment == {\"MFC_CONFIG\": \"/etc/mfc/model.yaml\", \"MFC_PORT\": \"8081\",
                             \"MFC_MODEL_NAME\": \"Team/Llama3_SQL:1\",
                             \"FOO\": \"bar\", \"EMPTY\": \"\"}" c.json
    jq -e "$s.deploy.resources.reservations.devices ==
           [{\"driver\": \"nvidia\", \"count\": 2, \"capabilities\": [\"gpu\"]}]" c.json
    jq -e "$s.labels.\"prometheus.io/port\" == \"8081\"" c.json
}

@test "manifest --gpus 0 asks for no GPU; --replicas and a digest reference work" {
    local d
    d=$(cat "$DATA/digest")
    "$MFC" manifest -k --gpus 0 --replicas 3 "$d" 2>/dev/null | Y >"$BATS_TEST_TMPDIR/k.json"
    cd "$BATS_TEST_TMPDIR"
    jq -e '.[0].spec.replicas == 3 and (.[0].spec.template.spec.containers[0].resources.limits | has("nvidia.com/gpu") | not)' k.json
    jq -e '.[0].metadata.name | test("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")' k.json
    jq -e '.[0].spec.template.spec.containers[0].ports[0].containerPort == 9000' k.json
    "$MFC" manifest -c -g 0 Team/Llama3_SQL:1 2>/dev/null | Y |
        jq -e '.[0].services["llama3-sql"].deploy.resources.reservations | has("devices") | not'
}

@test "manifest: usage errors exit 2, an unknown image exits 1 naming it" {
    run "$MFC" manifest Team/Llama3_SQL:1
    [ "$status" -eq 2 ] && [[ "$output" == *"give one of --kubernetes or --compose"* ]]
    run "$MFC" manifest -k -c Team/Llama3_SQL:1
    [ "$status" -eq 2 ]
    run "$MFC" manifest -k
    [ "$status" -eq 2 ] && [[ "$output" == *"expects one IMAGE"* ]]
    run "$MFC" manifest -k --name Bad_Name Team/Llama3_SQL:1
    [ "$status" -eq 2 ] && [[ "$output" == *"--name 'Bad_Name'"* ]]
    run "$MFC" manifest -k --port 70000 Team/Llama3_SQL:1
    [ "$status" -eq 2 ] && [[ "$output" == *"--port '70000'"* ]]
    run "$MFC" manifest -k --gpus x Team/Llama3_SQL:1
    [ "$status" -eq 2 ]
    run "$MFC" manifest -k --port
    [ "$status" -eq 2 ] && [[ "$output" == *"needs a value"* ]]
    run "$MFC" manifest -k no/such:image
    [ "$status" -eq 1 ] && [[ "$output" == *"no/such:image"* ]]
    run "$MFC" help manifest
    [ "$status" -eq 0 ] && [[ "$output" == *"--kubernetes"* ]]
}

@test "docker/: the compose file, Kubernetes manifests and workflow parse and deploy right" {
    local D="$MFC_SRCDIR/docker"
    cd "$BATS_TEST_TMPDIR"
    Y "$D/kubernetes.yaml" >k.json
    jq -e '[.[].kind] == ["Deployment", "Service"]' k.json
    local c='.[0].spec.template.spec.containers[0]'
    jq -e "$c.resources.limits.\"nvidia.com/gpu\" == 1 and $c.ports[0].containerPort == 8080" k.json
    jq -e "$c.livenessProbe.httpGet.path == \"/health\" and $c.readinessProbe.httpGet.path == \"/health\"" k.json
    jq -e '.[0].spec.template.metadata.annotations."prometheus.io/path" == "/metrics"
           and .[0].spec.template.metadata.annotations."prometheus.io/port" == "8080"' k.json
    jq -e '.[1].spec.ports[0].port == 8080' k.json
    Y "$D/compose.yaml" >c.json
    jq -e '[.[0].services[]][0] | .ports == ["8080:8080"]
           and .deploy.resources.reservations.devices[0].capabilities == ["gpu"]' c.json
    Y "$D/github-actions-example.yml" >w.json
    jq -e '.[0].jobs | length >= 1' w.json
    grep -q 'mfc push' "$D/github-actions-example.yml"
    # docs/ci.md shows the same workflow as docker/github-actions-example.yml
    python3 - "$MFC_SRCDIR/docs/ci.md" "$D/github-actions-example.yml" <<'PY'
import sys
md, wf = (open(p, encoding="utf-8").read() for p in sys.argv[1:])
block = md.split("```yaml\n", 1)[1].split("```", 1)[0]
assert block == wf, "docs/ci.md's workflow differs from docker/github-actions-example.yml"
PY
}

@test "manifest: docker-compose accepts the Compose file; podman kube play runs the Kubernetes one" {
    command -v docker-compose || { echo "docker-compose is not installed (script/bootstrap installs it)"; false; }
    command -v podman || { echo "podman is not installed (script/bootstrap installs it)"; false; }
    local T="$BATS_TEST_TMPDIR" port
    cd "$T"
    "$MFC" manifest --compose Team/Llama3_SQL:1 >compose.yaml
    docker-compose -f compose.yaml config -q
    docker-compose -f "$MFC_SRCDIR/docker/compose.yaml" config -q
    # a compose file the schema refuses fails here too (the check can fail)
    sed 's/restart: unless-stopped/restart: unless-stopped\n    no_such_key: 1/' compose.yaml >bad.yaml
    ! docker-compose -f bad.yaml config -q

    # an image with the real runtime, under podman as serve.bats runs one
    export MFC_SERVE="$MFC_BUILDDIR/mfc-serve" MFC_HOME="$T/store"
    mkdir ctx && cp "$DATA/base.gguf" ctx/ && echo "FROM ./base.gguf" >ctx/Modelfile
    "$MFC" build -q -t kube-test/toy:1 --output "type=docker,dest=$T/toy.tar" ctx >/dev/null
    P=(podman --root "$T/podman" --runroot "$T/podman-run" --storage-driver=vfs
       --runtime runc --cgroup-manager=cgroupfs --events-backend=none)
    timeout 120 "${P[@]}" load -i toy.tar >/dev/null
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    "$MFC" manifest --kubernetes --gpus 0 --image docker.io/kube-test/toy:1 kube-test/toy:1 |
        sed "s/^\( *\)containerPort: 8080$/&\n\1hostPort: $port/" >k.yaml
    grep -q "hostPort: $port" k.yaml
    # runc cannot raise podman's default rlimits without CAP_SYS_RESOURCE (docs/image.md)
    printf '[containers]\ndefault_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]\n' >containers.conf
    CONTAINERS_CONF="$T/containers.conf" timeout 120 "${P[@]}" kube play k.yaml
    local ok=0
    for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$port/health" >/dev/null && { ok=1; break; }
        sleep 0.1
    done
    "${P[@]}" ps -a --format '{{.Names}} {{.Status}}'
    [ "$ok" = 1 ]
    # the name the image records (its first tag): the same under podman as under mfc serve
    curl -sf "http://127.0.0.1:$port/metrics" | grep -q '^mfc:num_requests_running{model_name="kube-test/toy:1"} 0'
    timeout 60 "${P[@]}" kube down k.yaml
}

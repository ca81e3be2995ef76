# registry_helpers.bash: start and stop the Debian docker-registry
# (distribution 2.8) on 127.0.0.1 with htpasswd auth (user alice, password
# $PW), storage under $T; and push raw blobs/manifests with curl.
# Shared by registry.bats and build-from.bats.

PW=${PW:-s3cret-Pw-417}

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# Starts docker-registry; sets R=127.0.0.1:PORT and writes $T/registry.pid.
start_registry() {
    PORT=$(free_port)
    R="127.0.0.1:$PORT"
    htpasswd -Bbn alice "$PW" >"$T/htpasswd"
    cat >"$T/config.yml" <<YML
version: 0.1
log:
  level: info
storage:
  filesystem:
    rootdirectory: $T/storage
  delete:
    enabled: true
http:
  addr: $R
auth:
  htpasswd:
    realm: basic-realm
    path: $T/htpasswd
YML
    # REGISTRY_* variables override the registry's own config (REGISTRY_AUTH_FILE would be auth.file)
    env -u REGISTRY_AUTH_FILE timeout 900 docker-registry serve "$T/config.yml" >"$T/registry.log" 2>&1 &
    echo $! >"$T/registry.pid"
    for _ in $(seq 600); do
        [ "$(curl -s -m 1 -o /dev/null -w '%{http_code}' "http://$R/v2/")" = 401 ] && return 0
        sleep 0.1
    done
    echo "docker-registry did not start"; cat "$T/registry.log"; return 1
}

stop_registry() {
    [ -f "$T/registry.pid" ] && kill "$(cat "$T/registry.pid")" 2>/dev/null
    true
}

# push_blob REPO FILE: uploads FILE (POST then PUT ?digest=); prints its digest.
push_blob() {
    local d loc
    d="sha256:$(sha256sum "$2" | cut -d' ' -f1)"
    loc=$(curl -sf -m 30 -u "alice:$PW" -X POST -D - -o /dev/null "http://$R/v2/$1/blobs/uploads/" |
        tr -d '\r' | sed -n 's/^[Ll]ocation: //p')
    case "$loc" in http*) ;; *) loc="http://$R$loc" ;; esac
    case "$loc" in *\?*) loc="$loc&digest=$d" ;; *) loc="$loc?digest=$d" ;; esac
    curl -sf -m 60 -u "alice:$PW" -X PUT -H 'Content-Type: application/octet-stream' \
        --data-binary "@$2" "$loc" >/dev/null || return 1
    echo "$d"
}

# push_manifest REPO TAG FILE MEDIATYPE
push_manifest() {
    curl -sf -m 30 -u "alice:$PW" -X PUT -H "Content-Type: $4" --data-binary "@$3" \
        "http://$R/v2/$1/manifests/$2" >/dev/null
}

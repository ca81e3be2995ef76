#!/usr/bin/env bats
# run-sandbox.bats: RUN steps in the bubblewrap sandbox (docs/run.md), with
# real builds: no network unless --network=host and mfc build --allow
# network.host (a python http.server on 127.0.0.1 is the probe; without the
# grant the build stops before any step runs); /context, /inputs and the
# host are read-only or invisible, the host's /etc (shadow) is not there,
# the step is uid 1000 inside and nobody outside (root inside only with
# --user=0), for a root and a non-root invoker; a secret is seen only by
# its step, lands in no blob, and no 8-byte run of it (or of its base64,
# hex or reverse) is printed; ENV and
# ARG reach the command; /out becomes a layer (umoci unpack shows it) whose
# files later lines use (ADAPTER /out/x.gguf); failures name the line, the
# status and the output; a cached RUN does not run again; --timeout kills it;
# a bwrap that cannot create namespaces stops the build with the fix named.

load helpers

setup_file() {
    export DATA="$BATS_FILE_TMPDIR/data"
    mkdir -p "$DATA"
    MKMODEL="$MFC_BUILDDIR/tests/tools/mkmodel"
    "$MKMODEL" -o "$DATA/base.gguf" --preset toy --seed 1 >/dev/null
    "$MKMODEL" -o "$DATA/lora.gguf" --preset toy --lora 4 --targets q,v >/dev/null
}

setup() {
    T="$BATS_TEST_TMPDIR"
    # umoci 0.4.7 (Debian 12) unpacks gzip layers only: the runtime layer too
    export MFC_HOME="$T/store" MFC_SERVE=/bin/echo MFC_RUNTIME_COMPRESSION=gzip
    CTX="$T/ctx"
    mkdir -p "$CTX"
    cp "$DATA/base.gguf" "$DATA/lora.gguf" "$CTX/"
}

# Writes the Modelfile: FROM ./base.gguf, then the lines given.
mf() {
    printf '%s\n' "FROM ./base.gguf" "$@" >"$CTX/Modelfile"
}

@test "RUN has no network by default and the host's with --network=host" {
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    python3 -m http.server "$port" --bind 127.0.0.1 --directory "$T" >/dev/null 2>&1 &
    srv=$!
    for _ in $(seq 600); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
    mf "RUN bash -c 'exec 3<>/dev/tcp/127.0.0.1/$port' && echo REACHED >/out/net || echo BLOCKED >/out/net"
    run "$MFC" build -q -t none "$CTX"
    mf "RUN --network=host bash -c 'exec 3<>/dev/tcp/127.0.0.1/$port' && echo REACHED >/out/net || echo BLOCKED >/out/net"
    run2=$("$MFC" build -q --allow network.host -t host "$CTX" 2>&1) || true
    kill "$srv"
    [ "$status" -eq 0 ]
    "$MFC" save none -o "type=oci,dest=$T/o1" && "$MFC" save host -o "type=oci,dest=$T/o2"
    umoci unpack --rootless --image "$T/o1:none" "$T/b1" >/dev/null
    umoci unpack --rootless --image "$T/o2:host" "$T/b2" >/dev/null
    [ "$(cat "$T/b1/rootfs/out/net")" = BLOCKED ]
    [ "$(cat "$T/b2/rootfs/out/net")" = REACHED ]
}

@test "RUN --network=host without --allow network.host fails before any step runs, naming the line and the flag" {
    mf "RUN --mount=type=cache,target=/c,id=probe touch /c/ran" \
       "RUN --network=host echo hi >/out/x"
    run "$MFC" build -q "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"Modelfile:3: RUN --network=host echo hi >/out/x"* ]]
    [[ "$output" == *"--network=host needs the network.host entitlement"* ]]
    [[ "$output" == *"mfc build --allow network.host"* ]]
    # nothing ran: not the first RUN either, and no tag, no cache record
    [ -z "$(find "$MFC_HOME" -name ran 2>/dev/null)" ]
    [ -z "$(ls -A "$MFC_HOME/cache" 2>/dev/null)" ]
    # an unknown entitlement is a usage error
    run "$MFC" build -q --allow security.insecure "$CTX"
    [ "$status" -eq 2 ]
    [[ "$output" == *"unknown entitlement 'security.insecure'"* ]]
    # granted, it builds
    "$MFC" build -q --allow network.host "$CTX" >/dev/null
    [ -n "$(find "$MFC_HOME" -name ran)" ]
}

teardown() {
    [ -z "${U:-}" ] || rm -rf "$U"
}

# Runs mfc as the user whose uid is $1 (setpriv), with a home and store of
# its own in $U (under /tmp: the test's own directory is root's, mode 0700).
mfc_as() {
    local uid=$1
    shift
    chown -R "$uid:$uid" "$U"
    setpriv --reuid="$uid" --regid="$uid" --clear-groups \
        env HOME="$U" MFC_HOME="$U/store" MFC_SERVE=/bin/echo "$MFC" "$@"
}

@test "RUN sees no host secret (/etc/shadow), is uid 1000 inside and not root outside; --user=0 is root inside only" {
    mf "RUN cp /etc/shadow /out/"
    run "$MFC" build -q "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"cannot stat '/etc/shadow'"* ]]
    # /etc is mfc's; the step's files on the host belong to nobody (mfc runs as root
    # here) or to the invoking user; --user=0 gives uid 0 inside only
    mf "RUN --mount=type=cache,target=/c,id=who sh -c 'id -u >/out/uid; id -un >/out/name; \
ls /etc >/out/etc; touch /c/made; cat /etc/passwd >/out/passwd; \
for f in /etc/shadow /etc/gshadow /etc/sudoers /etc/ssh /root /home; do test -e \$f && echo \$f; done >/out/seen; true'" \
       "RUN --user=0 sh -c 'id -u >/out/root-uid; touch /usr/x 2>/dev/null || echo ro >/out/root-usr'"
    "$MFC" build -q -t m "$CTX" >/dev/null
    "$MFC" save m -o "type=oci,dest=$T/o"
    umoci unpack --rootless --image "$T/o:m" "$T/b" >/dev/null
    r="$T/b/rootfs/out"
    [ "$(cat "$r/uid")" = 1000 ]
    [ "$(cat "$r/name")" = mfc ]
    [ ! -s "$r/seen" ] || { cat "$r/seen"; false; }
    ! grep -q "^$(id -un):" "$r/passwd" || [ "$(id -un)" = root ]
    [ "$(grep -c . "$r/passwd")" = 3 ]
    [ "$(cat "$r/root-uid")" = 0 ]
    [ "$(cat "$r/root-usr")" = ro ]
    made=$(find "$MFC_HOME/run-cache" -name made)
    if [ "$(id -u)" = 0 ]; then
        [ "$(stat -c %u "$made")" = 65534 ]
    else
        [ "$(stat -c %u "$made")" = "$(id -u)" ]
    fi
    # a non-root invoker (when this test runs as root: uid 1000 through setpriv)
    if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
        U=$(mktemp -d /tmp/mfc-run-user.XXXXXX)
        mkdir -p "$U/ctx"
        cp "$CTX/base.gguf" "$U/ctx/"
        printf '%s\n' "FROM ./base.gguf" \
            "RUN --mount=type=cache,target=/c sh -c 'id -u >/out/uid; touch /c/made; cp /etc/shadow /out/ || echo refused >/out/shadow'" \
            >"$U/ctx/Modelfile"
        mfc_as 1000 build -q -t u "$U/ctx" >/dev/null
        mfc_as 1000 save u -o "type=oci,dest=$U/o"
        umoci unpack --rootless --image "$U/o:u" "$T/ub" >/dev/null
        [ "$(cat "$T/ub/rootfs/out/uid")" = 1000 ]
        [ "$(cat "$T/ub/rootfs/out/shadow")" = refused ]
        [ "$(stat -c %u "$(find "$U/store/run-cache" -name made)")" = 1000 ]
    fi
}

@test "RUN cannot write to /context, /inputs or the host, and does not see the host's files" {
    echo keep >"$T/hostfile"
    mf "RUN touch /context/x 2>/dev/null && echo ctx-writable >>/out/bad; \
touch /inputs/model.gguf 2>/dev/null && echo inputs-writable >>/out/bad; \
echo x >>$T/hostfile 2>/dev/null && echo host-writable >>/out/bad; \
test -e $T/hostfile && echo host-visible >>/out/bad; \
touch /usr/x 2>/dev/null && echo usr-writable >>/out/bad; \
cmp -s /inputs/model.gguf /context/base.gguf && echo ok >/out/ok; exit 0"
    "$MFC" build -q -t m "$CTX" >/dev/null
    [ "$(cat "$T/hostfile")" = keep ]
    [ ! -e "$CTX/x" ]
    "$MFC" save m -o "type=oci,dest=$T/o"
    umoci unpack --rootless --image "$T/o:m" "$T/b" >/dev/null
    [ ! -e "$T/b/rootfs/out/bad" ] || { cat "$T/b/rootfs/out/bad"; false; }
    [ "$(cat "$T/b/rootfs/out/ok")" = ok ]
}

@test "a secret is mounted for its step only, and is in no blob, record or log" {
    printf 'S3CR3T-%s' "$RANDOM$RANDOM" >"$T/token"
    tok=$(cat "$T/token")
    sum=$(sha256sum <"$T/token" | cut -c1-64)
    mf "RUN --mount=type=secret,id=tok test \"\$(sha256sum </run/secrets/tok | cut -c1-64)\" = $sum && echo seen >/out/first" \
       "RUN test -e /run/secrets/tok && echo leaked >/out/second || echo gone >/out/second" \
       "RUN --mount=type=secret,id=tok,target=/tmp/t,required=true test \"\$(sha256sum </tmp/t | cut -c1-64)\" = $sum && test ! -e /run/secrets/tok && echo moved >/out/third"
    run "$MFC" build --progress plain --secret "id=tok,src=$T/token" -t m "$CTX"
    [ "$status" -eq 0 ]
    [[ "$output" != *"$tok"* ]]
    "$MFC" save m -o "type=oci,dest=$T/o"
    umoci unpack --rootless --image "$T/o:m" "$T/b" >/dev/null
    [ "$(cat "$T/b/rootfs/out/first")" = seen ]
    [ "$(cat "$T/b/rootfs/out/second")" = gone ]
    [ "$(cat "$T/b/rootfs/out/third")" = moved ]
    ! grep -rqF "$tok" "$MFC_HOME"
    # a required secret that is not given stops the step (a cached step needs none:
    # the secret is not in the key)
    mf "RUN --mount=type=secret,id=tok,required=true true"
    run "$MFC" build -q --no-cache "$CTX"
    [ "$status" -ne 0 ]
    [[ "$output" == *"secret 'tok' is required"* ]]
    # a command that prints the secret and fails: the error masks it
    mf "RUN --mount=type=secret,id=tok cat /run/secrets/tok; echo; exit 1"
    run "$MFC" build -q --secret "id=tok,src=$T/token" "$CTX"
    [ "$status" -ne 0 ]
    [[ "$output" == *"exited with status 1"* ]]
    [[ "$output" == *"*************"* ]]
    [[ "$output" != *"$tok"* ]]
}

@test "no 8-byte run of a secret, of its base64, hex or reverse reaches the error or the build log" {
    printf 'tok-%s-%s' "$RANDOM$RANDOM$RANDOM" "$RANDOM$RANDOM" >"$T/token"
    tok=$(cat "$T/token")
    b64=$(base64 -w0 <"$T/token")
    b64x=$(printf 'x%s' "$tok" | base64 -w0)  # the secret at another alignment
    hexl=$(od -An -tx1 <"$T/token" | tr -d ' \n')
    hexu=$(echo "$hexl" | tr a-f A-F)
    rev=$(echo "$tok" | rev)
    mf "RUN --mount=type=secret,id=tok sh -c 'head -c 10 /run/secrets/tok; echo; cut -c3-11 /run/secrets/tok; echo; \
base64 -w0 /run/secrets/tok; echo; { printf x; cat /run/secrets/tok; } | base64 -w0; echo; \
od -An -tx1 /run/secrets/tok | tr -d \" \\n\"; echo; rev /run/secrets/tok; echo; echo PLAIN-TAIL; exit 3'"
    for mode in plain json; do
        run "$MFC" build --progress $mode --secret "id=tok,src=$T/token" "$CTX"
        [ "$status" -eq 1 ]
        [[ "$output" == *"exited with status 3"* ]]
        [[ "$output" == *PLAIN-TAIL* ]] # the rest of the output is kept
        for form in "${tok:0:10}" "${tok:2:9}" "$b64" "${b64:4:12}" "${b64x:4:12}" "$hexl" "${hexl:6:16}" \
            "${hexu:6:16}" "$rev" "${rev:3:9}"; do
            [[ "$output" != *"$form"* ]] || { echo "printed: $form"; false; }
        done
        [[ "$output" == *"**********"* ]]
    done
    # every secret of the build is masked, not only the step's own (an earlier
    # step may have left one in a cache mount) ...
    printf 'tok-2-%s' "$RANDOM$RANDOM$RANDOM" >"$T/token2"
    mf "RUN --mount=type=secret,id=tok cat /run/secrets/tok; exit 4"
    run "$MFC" build -q --secret "id=tok,src=$T/token" --secret "id=big,src=$T/token2" "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"exited with status 4"* ]]
    [[ "$output" != *"$tok"* ]]
    # ... and when one cannot be masked (over the 64 KiB a secret may have), the
    # output is withheld rather than printed unmasked
    head -c 70000 /dev/zero | tr '\0' a >"$T/token2"
    run "$MFC" build -q --secret "id=tok,src=$T/token" --secret "id=big,src=$T/token2" "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"output withheld"* ]]
    [[ "$output" != *"${tok:0:8}"* ]]
}

@test "RUN sees ENV and ARG (with --build-arg and defaults), and LABEL/ENV reach the image" {
    mf "ARG GREETING=hello" "ARG WHO" "ENV MODE=\${WHO:-nobody}-mode" "LABEL org.example.k=\$GREETING" \
       "RUN echo \"\$GREETING \$WHO \$MODE\" >/out/env; env | grep -c '^HOSTNAME=' >/out/hostenv || true"
    "$MFC" build -q -t a "$CTX" >/dev/null
    "$MFC" build -q -t b --build-arg WHO=world --build-arg GREETING=hi "$CTX" >/dev/null
    "$MFC" save a -o "type=oci,dest=$T/oa" && "$MFC" save b -o "type=oci,dest=$T/ob"
    umoci unpack --rootless --image "$T/oa:a" "$T/ba" >/dev/null
    umoci unpack --rootless --image "$T/ob:b" "$T/bb" >/dev/null
    [ "$(cat "$T/ba/rootfs/out/env")" = "hello  nobody-mode" ]
    [ "$(cat "$T/bb/rootfs/out/env")" = "hi world world-mode" ]
    [ "$(cat "$T/ba/rootfs/out/hostenv")" = 0 ]
    skopeo inspect "oci:$T/ob:b" | jq -e '.Labels."org.example.k" == "hi"'
    skopeo inspect --config "oci:$T/ob:b" | jq -e '.config.Env | index("MODE=world-mode") != null'
}

@test "/out becomes a layer; ADAPTER /out/x.gguf takes the RUN's file, not the host path" {
    mf "RUN mkdir -p /out/sub && cp /context/lora.gguf /out/sql.gguf && echo note >/out/sub/readme.txt" \
       "ADAPTER --name=sql /out/sql.gguf"
    # the plan: RUN reads FROM's check; the ADAPTER's source reads the RUN; the image takes its layer
    "$MFC" plan --format json "$CTX" >"$T/plan.json"
    run_id=$(jq '.nodes[] | select(.op == "run") | .id' "$T/plan.json")
    jq -e --argjson r "$run_id" '.nodes[] | select(.op == "source" and .role == "adapter") | .inputs == [$r]' "$T/plan.json"
    jq -e --argjson r "$run_id" '.nodes[] | select(.op == "image") | .inputs | index($r) != null' "$T/plan.json"
    jq -e '.nodes[] | select(.op == "run") | .args.inputs == ["model.gguf"] and .args.exclude == ["sql.gguf"]' "$T/plan.json"
    run "$MFC" build --progress plain -t m "$CTX"
    [ "$status" -eq 0 ]
    "$MFC" save m -o "type=oci,dest=$T/o"
    umoci unpack --rootless --image "$T/o:m" "$T/b" >/dev/null
    r="$T/b/rootfs"
    [ "$(cat "$r/out/sub/readme.txt")" = note ]
    # the adapter is in the image where adapters go, and not twice
    cmp "$r/adapters/sql.gguf" "$CTX/lora.gguf"
    [ ! -e "$r/out/sql.gguf" ]
    # equal builds give equal layers and images
    [ "$("$MFC" build -q --no-cache -t m "$CTX")" = "${lines[-1]}" ] # the same served name
    # FROM /out/...: the last FROM wins, and it is the file the RUN made from the first
    mf "RUN cp /inputs/model.gguf /out/m.gguf" "FROM /out/m.gguf"
    "$MFC" build -q -t m2 "$CTX" >/dev/null
    "$MFC" save m2 -o "type=oci,dest=$T/o2"
    umoci unpack --rootless --image "$T/o2:m2" "$T/b2" >/dev/null
    cmp "$T/b2/rootfs/models/model.gguf" "$CTX/base.gguf"
    [ ! -e "$T/b2/rootfs/out/m.gguf" ]
    # a RUN that does not write the file named: the error says what it wrote
    mf "RUN echo x >/out/other.gguf" "ADAPTER /out/sql.gguf"
    run "$MFC" build -q "$CTX"
    [ "$status" -ne 0 ]
    [[ "$output" == *"Modelfile:3: ADAPTER /out/sql.gguf"* ]]
    [[ "$output" == *"/out/other.gguf"* ]]
    # a pin on an /out file is checked against what the RUN wrote
    mf "RUN cp /context/lora.gguf /out/sql.gguf" "ADAPTER /out/sql.gguf@sha256:$(printf '0%.0s' $(seq 64))"
    run "$MFC" build -q "$CTX"
    [ "$status" -ne 0 ]
    [[ "$output" == *"but it is pinned to sha256:000"* ]]
    mf "RUN cp /context/lora.gguf /out/sql.gguf" "ADAPTER /out/sql.gguf@sha256:$(sha256sum <"$CTX/lora.gguf" | cut -c1-64)"
    "$MFC" build -q "$CTX" >/dev/null
}

@test "a failing RUN names its line, command, exit status and last output; nothing is kept" {
    mf "SYSTEM hi" "RUN echo first line; echo some error >&2; exit 7"
    run "$MFC" build -q "$CTX"
    [ "$status" -ne 0 ]
    [[ "$output" == *"Modelfile:3: RUN echo first line; echo some error >&2; exit 7"* ]]
    [[ "$output" == *"exited with status 7"* ]]
    [[ "$output" == *"some error"* ]]
    [ -z "$(ls -A "$MFC_HOME/tmp" 2>/dev/null)" ]
    # a step's temp /out left by an mfc killed mid-step goes at the next RUN
    mf "RUN echo x >/out/x"
    mkdir -p "$MFC_HOME/tmp/run-999999999-3-abc/sub" && touch "$MFC_HOME/tmp/run-999999999-3-abc/sub/f"
    "$MFC" build -q "$CTX" >/dev/null
    [ ! -e "$MFC_HOME/tmp/run-999999999-3-abc" ]
}

@test "a cached RUN is not executed again; a changed context runs it again" {
    mf "RUN --mount=type=cache,target=/cache echo run >>/cache/count; wc -l </cache/count >/out/n"
    "$MFC" build -q "$CTX" >/dev/null
    run "$MFC" build --progress plain "$CTX"
    [ "$status" -eq 0 ]
    grep -q 'RUN --mount=type=cache,target=/cache echo run.* CACHED' <<<"$output"
    # the cache mount persisted: one run so far; a context change re-runs and sees it
    echo more >"$CTX/new.txt"
    run "$MFC" build --progress plain -t m "$CTX"
    grep -q 'RUN --mount=type=cache,target=/cache echo run.* DONE' <<<"$output"
    "$MFC" save m -o "type=oci,dest=$T/o"
    umoci unpack --rootless --image "$T/o:m" "$T/b" >/dev/null
    [ "$(cat "$T/b/rootfs/out/n")" = 2 ]
}

@test "--timeout kills the sandbox; the build default applies without it; --run-memory limits it" {
    mf "RUN --timeout=1s sleep 30"
    start=$SECONDS
    run "$MFC" build -q "$CTX"
    [ "$status" -ne 0 ]
    [ $((SECONDS - start)) -lt 15 ]
    [[ "$output" == *"timed out after 1000 ms"* ]]
    mf "RUN sleep 30"
    run "$MFC" build -q --run-timeout=500ms "$CTX"
    [ "$status" -ne 0 ]
    [[ "$output" == *"timed out after 500 ms"* ]]
    # --run-memory: 256 MiB fits without it, not in 128 MiB of address space
    mf "RUN python3 -c 'b = bytearray(256 << 20)' && echo fits >/out/m"
    "$MFC" build -q "$CTX" >/dev/null
    run "$MFC" build -q --no-cache --run-memory=128M "$CTX"
    [ "$status" -ne 0 ]
    [[ "$output" == *"MemoryError"* ]]
}

@test "where bwrap cannot create namespaces, the build stops and names the fix" {
    mkdir -p "$T/bin"
    printf '#!/bin/sh\necho "bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces." >&2\nexit 1\n' >"$T/bin/bwrap"
    chmod +x "$T/bin/bwrap"
    mf "RUN echo hi >/out/x"
    run env MFC_BWRAP="$T/bin/bwrap" "$MFC" build -q "$CTX"
    [ "$status" -ne 0 ]
    [[ "$output" == *"No permissions to creating new namespace"* ]]
    [[ "$output" == *"kernel.unprivileged_userns_clone=1"* ]]
    [[ "$output" == *"--privileged"* ]]
    [[ "$output" == *"never runs RUN steps unsandboxed"* ]]
    run env MFC_BWRAP="$T/bin/none" "$MFC" build -q "$CTX"
    [ "$status" -ne 0 ]
    [[ "$output" == *"apt-get install bubblewrap"* ]]
}

@test "the run-peft example passes mfc check, and builds: the PEFT dir converted in the sandbox is the image's adapter" {
    run "$MFC" check "$MFC_SRCDIR/modelfiles/run-peft/Modelfile"
    [ "$status" -eq 0 ]
    dims="--layers 2 --embd 32 --ff 48 --heads 4 --kv-heads 2 --vocab 300"
    "$MFC_BUILDDIR/tests/tools/mkmodel" -o "$CTX/base.gguf" --preset toy $dims --seed 1 >/dev/null
    python3 "$MFC_SRCDIR/tests/cli/peft_ref.py" make "$CTX/sql-adapter" $dims --rank 4 \
        --targets q,v --alpha 8
    cp "$MFC_SRCDIR/modelfiles/run-peft/Modelfile" "$CTX/"
    "$MFC" build -q -t sql "$CTX" >/dev/null
    "$MFC" lora convert "$CTX/sql-adapter" --base "$CTX/base.gguf" -o "$T/host.gguf" >/dev/null  # the same conversion, on the host
    "$MFC" save sql -o "type=oci,dest=$T/o"
    umoci unpack --rootless --image "$T/o:sql" "$T/b" >/dev/null
    cmp "$T/b/rootfs/adapters/sql.gguf" "$T/host.gguf"
    cmp "$T/b/rootfs/models/model.gguf" "$CTX/base.gguf"
    grep -q 'sql' "$T/b/rootfs/etc/mfc/model.yaml"
}

#!/usr/bin/env bats
# build-context.bats: the build context is a boundary, as in docker build
# (fetch/fetch.c, docs/modelfile.md): a relative FROM/ADAPTER that leaves
# it (..), a symlink in it that points out (to another directory or to
# /etc/shadow), a directory source holding such a symlink, and a context
# Modelfile that is such a symlink are refused, naming the path, before
# anything is read; an absolute path names any file, as before; and a file
# that fails to parse is never quoted (no "magic is 72 6f 6f 74").
load helpers

setup_file() {
    export DATA="$BATS_FILE_TMPDIR/data"
    mkdir -p "$DATA"
    "$MFC_BUILDDIR/tests/tools/mkmodel" -o "$DATA/base.gguf" --preset toy --seed 1 >/dev/null
}

setup() {
    T="$BATS_TEST_TMPDIR"
    export MFC_HOME="$T/store" MFC_SERVE=/bin/echo
    CTX="$T/ctx"
    mkdir -p "$CTX" "$T/outside"
    cp "$DATA/base.gguf" "$T/outside/model.gguf"
    # a file that is not GGUF, standing for any host secret
    printf 'root:$y$j9T$Zq0s4NotAHash:19000:0:99999:7:::\n' >"$T/outside/shadow"
}

mf() {
    printf '%s\n' "$@" >"$CTX/Modelfile"
}

@test "FROM ../outside/model.gguf leaves the context: refused before anything is stored" {
    mf "FROM ../outside/model.gguf"
    run "$MFC" build -q -t m "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"../outside/model.gguf: the path leaves the build context $CTX"* ]]
    [[ "$output" == *"absolute path"* ]]
    [ -z "$(ls "$MFC_HOME/blobs/sha256" 2>/dev/null)" ]
    # mfc plan resolves sources too: the same refusal
    run "$MFC" plan "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"leaves the build context"* ]]
    # named by its absolute path, the same file builds
    mf "FROM $T/outside/model.gguf"
    "$MFC" build -q -t m "$CTX" >/dev/null
}

@test "symlinks in the context that point out of it are refused; one that stays inside is fine" {
    ln -s "$T/outside/model.gguf" "$CTX/linked.gguf"
    mf "FROM ./linked.gguf"
    run "$MFC" build -q "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"./linked.gguf: the path leaves the build context"* ]]
    ln -s ../outside/shadow "$CTX/model.gguf"
    mf "FROM ./model.gguf"
    run "$MFC" build -q "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"leaves the build context"* ]]
    [[ "$output" != *'$y$'* ]]
    # an adapter directory whose file links out
    mkdir -p "$CTX/peft"
    echo '{}' >"$CTX/peft/adapter_config.json"
    ln -s "$T/outside/model.gguf" "$CTX/peft/adapter_model.safetensors"
    cp "$DATA/base.gguf" "$CTX/base.gguf"
    mf "FROM ./base.gguf" "ADAPTER ./peft"
    run "$MFC" build -q "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"peft/adapter_model.safetensors leaves the build context"* ]]
    # inside the context, a symlink is followed as before
    ln -s base.gguf "$CTX/alias.gguf"
    mf "FROM ./alias.gguf"
    "$MFC" build -q "$CTX" >/dev/null
}

@test "a context Modelfile that links out of the context is not read (its lines would be quoted)" {
    ln -s "$T/outside/shadow" "$CTX/Modelfile"
    run "$MFC" build -q "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"leaves the build context"* ]]
    [[ "$output" != *'$y$'* ]]
    [[ "$output" != *"root:"* ]]
    # -f names it explicitly: then it is the caller's own file to read
    run "$MFC" build -q -f "$T/outside/shadow" "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" != *"leaves the build context"* ]]
}

@test "a file that fails to parse is never quoted: GGUF magic, safetensors length, JSON" {
    mf "FROM $T/outside/shadow"
    run "$MFC" build -q "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" == *"not a GGUF file"* ]]
    [[ "$output" != *"72 6f 6f 74"* ]]
    [[ "$output" != *"root"* ]]
    run "$MFC" inspect "$T/outside/shadow"
    [ "$status" -ne 0 ]
    [[ "$output" != *"72 6f"* ]]
    # a safetensors/PEFT directory named absolutely, whose files are not what they say
    mkdir -p "$T/outside/peft"
    cp "$T/outside/shadow" "$T/outside/peft/adapter_model.safetensors"
    printf 'token=hf_SeCrEtVaLuE\n' >"$T/outside/peft/adapter_config.json"
    cp "$DATA/base.gguf" "$CTX/base.gguf"
    mf "FROM ./base.gguf" "ADAPTER $T/outside/peft"
    run "$MFC" build -q "$CTX"
    [ "$status" -eq 1 ]
    [[ "$output" != *"SeCrEt"* ]]
    [[ "$output" != *"root"* ]]
    [[ "$output" != *'$y$'* ]]
}

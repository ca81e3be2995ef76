#!/usr/bin/env bats
# modelfile.bats: `mfc check` and `mfc fmt` from the outside: exit codes,
# the caret diagnostics, --json, --build-arg, stdin, encodings, fmt -w/--check.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    DEMO="$MFC_SRCDIR/modelfiles/demo"
    T="$BATS_TEST_TMPDIR"
}

@test "check: the demo Modelfile is valid" {
    run "$MFC" check "$DEMO"
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == *"/Modelfile: ok, 15 instructions, 0 warnings" ]]
    [[ "$output" == *"ADAPTER    ./adapter name=pirate"* ]]
    [[ "$output" == *"PARAMETER  temperature = 0"* ]]
}

@test "check: PATH defaults to ./Modelfile" {
    cd "$DEMO"
    run "$MFC" check
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "./Modelfile: ok, 15 instructions, 0 warnings" ]]
}

@test "check: errors print file:line:col, the line, a caret and a hint; exit 1" {
    printf 'FROM x\nFORM y\nPARAMETER num-ctx 1\n' >"$T/Modelfile"
    run --separate-stderr "$MFC" check "$T/Modelfile"
    [ "$status" -eq 1 ]
    [ -z "$output" ]
    [ "${stderr_lines[0]}" = "$T/Modelfile:2:1: error: unknown instruction 'FORM'" ]
    [ "${stderr_lines[1]}" = "    2 | FORM y" ]
    [ "${stderr_lines[2]}" = "      | ^~~~" ]
    [ "${stderr_lines[3]}" = "hint: did you mean FROM?" ]
    [ "${stderr_lines[4]}" = "$T/Modelfile:3:14: error: invalid character '-' in PARAMETER name" ]
    [ "${stderr_lines[7]}" = "hint: did you mean num_ctx?" ]
    [ "${stderr_lines[8]}" = "$T/Modelfile: 2 errors, 0 warnings" ]
}

@test "check: warnings do not fail the check" {
    printf 'FROM x\nPARAMETER mirostat 1\n' >"$T/Modelfile"
    run --separate-stderr "$MFC" check "$T"
    [ "$status" -eq 0 ]
    [[ "$stderr" == *"warning: parameter mirostat is deprecated and ignored"* ]]
    [[ "$output" == *"(ignored: deprecated)"* ]]
}

@test "check: usage errors exit 2" {
    run "$MFC" check --bogus
    [ "$status" -eq 2 ]
    run "$MFC" check a b
    [ "$status" -eq 2 ]
    run "$MFC" check -f "$DEMO/Modelfile" "$DEMO"
    [ "$status" -eq 2 ]
    [[ "$output" == *"either -f FILE or PATH"* ]]
    run "$MFC" check --build-arg =x "$DEMO"
    [ "$status" -eq 2 ]
}

@test "check: a missing file exits 1" {
    run "$MFC" check "$T/nope"
    [ "$status" -eq 1 ]
    [[ "$output" == *"cannot open $T/nope"* ]]
}

@test "check --json: machine-readable, also for invalid files" {
    run --separate-stderr "$MFC" check --json "$DEMO"
    [ "$status" -eq 0 ]
    echo "$output" | jq -e '.ok == true and .errors == 0' >/dev/null
    echo "$output" | jq -e '.instructions[0] == {"kind":"from","line":9,"col":1,"ref":"./base","path":true}' >/dev/null
    echo "$output" | jq -e '[.instructions[] | select(.kind=="parameter" and .name=="stop") | .value] == ["<|im_end|>","<|im_start|>"]' >/dev/null
    echo "$output" | jq -e '.instructions[] | select(.kind=="parameter" and .name=="temperature") | .value == 0' >/dev/null
    printf 'FROM x\nPARAMETER top_k many\n' >"$T/bad"
    run --separate-stderr "$MFC" check --json -f "$T/bad"
    [ "$status" -eq 1 ]
    echo "$output" | jq -e '.ok == false and .diagnostics[0].line == 2 and .diagnostics[0].col == 17' >/dev/null
    [[ "$stderr" == *"invalid int value 'many' for top_k"* ]]
}

@test "check --build-arg: values reach ARG, from the command line or the environment" {
    printf 'ARG MODEL=llama3\nARG CTX\nFROM ${MODEL}\nPARAMETER num_ctx ${CTX}\n' >"$T/Modelfile"
    run --separate-stderr "$MFC" check --json --build-arg MODEL=qwen3 --build-arg CTX "$T"
    [ "$status" -eq 1 ] # CTX is not in the environment: "" is no int
    CTX=8192 run --separate-stderr "$MFC" check --json --build-arg MODEL=qwen3 --build-arg CTX "$T"
    [ "$status" -eq 0 ]
    echo "$output" | jq -e '.instructions[2].ref == "qwen3" and .instructions[3].value == 8192' >/dev/null
}

@test "check -f -: reads stdin" {
    run bash -c "printf 'FROM x\nSYSTEM hi\n' | '$MFC' check -f -"
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "<stdin>: ok, 2 instructions, 0 warnings" ]]
    run bash -c "printf 'SYSTEM hi\n' | '$MFC' check -f -"
    [ "$status" -eq 1 ]
    [[ "$output" == *"<stdin>: error: no FROM instruction"* ]]
}

@test "check: UTF-16 LE and BE files with a BOM read like UTF-8" {
    printf 'FROM x\nSYSTEM h\xc3\xa9llo\n' >"$T/u8"
    python3 -c "import sys; t=open(sys.argv[1],encoding='utf-8').read(); open(sys.argv[2],'wb').write(b'\xff\xfe'+t.encode('utf-16-le')); open(sys.argv[3],'wb').write(b'\xfe\xff'+t.encode('utf-16-be'))" "$T/u8" "$T/le" "$T/be"
    run "$MFC" check --json -f "$T/u8"
    want=$(echo "$output" | jq -c '.instructions')
    for f in le be; do
        run "$MFC" check --json -f "$T/$f"
        [ "$status" -eq 0 ]
        [ "$(echo "$output" | jq -c '.instructions')" = "$want" ]
    done
}

@test "check: CRLF files report true line numbers" {
    printf 'FROM x\r\nSYSTEM """a\r\nb"""\r\nFORM y\r\n' >"$T/crlf"
    run "$MFC" check -f "$T/crlf"
    [ "$status" -eq 1 ]
    [[ "$output" == *"$T/crlf:4:1: error: unknown instruction 'FORM'"* ]]
}

@test "fmt: prints the canonical form, and is idempotent" {
    printf 'from  x\nsystem """hi"""\n\n\n# c\nparameter stop " a"\ntemplate """l1\nl2"""\n' >"$T/in"
    run "$MFC" fmt -f "$T/in"
    [ "$status" -eq 0 ]
    [ "$output" = "$(printf 'FROM x\nSYSTEM hi\n\n# c\nPARAMETER stop " a"\nTEMPLATE """l1\nl2"""')" ]
    "$MFC" fmt -f "$T/in" >"$T/once"
    "$MFC" fmt -f "$T/once" >"$T/twice"
    cmp "$T/once" "$T/twice"
    "$MFC" fmt --check -f "$T/once"
}

@test "fmt: the demo Modelfile is already canonical" {
    run "$MFC" fmt --check "$DEMO"
    [ "$status" -eq 0 ]
    [ -z "$output" ]
}

@test "fmt --check exits 1 on an unformatted file; -w fixes it in place" {
    printf 'from x\n' >"$T/Modelfile"
    run "$MFC" fmt --check "$T"
    [ "$status" -eq 1 ]
    [[ "$output" == *"not formatted"* ]]
    run "$MFC" fmt -w "$T"
    [ "$status" -eq 0 ]
    [ -z "$output" ]
    [ "$(cat "$T/Modelfile")" = "FROM x" ]
    run "$MFC" fmt --check "$T"
    [ "$status" -eq 0 ]
    [ -z "$(ls "$T" | grep -v '^Modelfile$')" ] # no temporary left behind
}

@test "fmt: UTF-16 input comes out as UTF-8" {
    python3 -c "import sys; open(sys.argv[1],'wb').write(b'\xff\xfe'+'FROM x\nSYSTEM \u00e9\n'.encode('utf-16-le'))" "$T/le"
    run "$MFC" fmt -f "$T/le"
    [ "$status" -eq 0 ]
    [ "$output" = "$(printf 'FROM x\nSYSTEM \xc3\xa9')" ]
    run "$MFC" fmt --check -f "$T/le"
    [ "$status" -eq 1 ]
}

@test "fmt: refuses files with errors, and bad usage" {
    printf 'FROM x\nFORM y\n' >"$T/bad"
    run "$MFC" fmt -f "$T/bad"
    [ "$status" -eq 1 ]
    [[ "$output" == *"unknown instruction 'FORM'"* ]]
    run "$MFC" fmt -w -f -
    [ "$status" -eq 2 ]
    run "$MFC" fmt -w --check "$DEMO"
    [ "$status" -eq 2 ]
}

@test "fmt: keeps ARG references, even without --build-arg values" {
    printf 'ARG CTX\nfrom x\nPARAMETER num_ctx ${CTX}\n' >"$T/Modelfile"
    run "$MFC" fmt "$T"
    [ "$status" -eq 0 ]
    [ "$output" = "$(printf 'ARG CTX\nFROM x\nPARAMETER num_ctx ${CTX}')" ]
}

@test "help lists check and fmt, and each has --help" {
    run "$MFC" help
    [[ "$output" == *"check"* && "$output" == *"fmt"* ]]
    run "$MFC" check --help
    [ "$status" -eq 0 ]
    [[ "$output" == *"--build-arg"* ]]
    run "$MFC" help fmt
    [ "$status" -eq 0 ]
    [[ "$output" == *"--check"* ]]
}

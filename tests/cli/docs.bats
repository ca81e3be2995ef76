#!/usr/bin/env bats
# docs.bats: the user docs keep up with the code: every command `mfc help`
# lists is in mfc(1) and docs/cli.md, both man pages render without groff
# warnings, every relative link in README.md and docs/*.md names a file that
# exists, and docs/troubleshooting.md covers every MF_E* code in common/err.h.

load helpers

# The command names `mfc help` lists (the lines between "Commands:" and the blank line).
commands() {
    "$MFC" help | awk '/^Commands:/ {on = 1; next} on && NF == 0 {exit} on {print $1}'
}

@test "docs: every command in 'mfc help' is in mfc.1 and docs/cli.md" {
    local n=0 missing=()
    for c in $(commands); do
        n=$((n + 1))
        # mfc.1: a .TP entry whose tag is the command (".BR name ..." or ".B name")
        grep -Eq "^\.B[R]? $c( |$)" "$MFC_SRCDIR/docs/man/mfc.1" || missing+=("mfc.1:$c")
        # docs/cli.md: a row of the command index, | `mfc name ...` |
        grep -Eq "^\| \`mfc $c( [^\`]*)?\` \|" "$MFC_SRCDIR/docs/cli.md" || missing+=("cli.md:$c")
    done
    echo "commands: $n; missing: ${missing[*]}"
    [ "$n" -ge 20 ]
    [ ${#missing[@]} -eq 0 ]
}

@test "docs: the man pages render without warnings" {
    command -v groff || { echo "groff is not installed"; false; }
    for m in docs/man/mfc.1 docs/man/Modelfile.5; do
        run groff -man -Tutf8 -ww -z "$MFC_SRCDIR/$m"
        echo "$m: $output"
        [ "$status" -eq 0 ] && [ -z "$output" ]
        run groff -man -Tutf8 -P-cbou "$MFC_SRCDIR/$m"
        [[ "$output" == *"SEE ALSO"* ]]
    done
}

@test "docs: relative links in README.md and docs/*.md point at files that exist" {
    cd "$MFC_SRCDIR"
    run python3 - README.md docs/*.md <<'PY'
import os, re, sys
bad = []
for f in sys.argv[1:]:
    text = open(f, encoding="utf-8").read()
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # not links inside code blocks
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = os.path.normpath(os.path.join(os.path.dirname(f), target.split("#")[0]))
        if not os.path.exists(path):
            bad.append(f"{f}: {target}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
    echo "$output"
    [ "$status" -eq 0 ]
}

@test "docs: troubleshooting.md names every MF_E* error code" {
    local codes
    codes=$(grep -oE 'MF_E[A-Z]+ = ' "$MFC_SRCDIR/common/err.h" | cut -d' ' -f1)
    [ -n "$codes" ]
    for c in $codes; do
        grep -q "$c" "$MFC_SRCDIR/docs/troubleshooting.md" || { echo "missing $c"; false; }
    done
}

@test "docs: every Modelfile snippet of getting-started.md and modelfile.md passes mfc check as printed" {
    local n=0 f
    for doc in docs/getting-started.md docs/modelfile.md; do
        # each ``` block (no language) whose first instruction line is FROM
        python3 - "$MFC_SRCDIR/$doc" "$BATS_TEST_TMPDIR/${doc##*/}" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
blocks = re.findall(r"^```\n(.*?)^```$", text, re.S | re.M)
n = 0
for b in blocks:
    first = next((l for l in b.splitlines() if l.strip() and not l.startswith("#")), "")
    if first.split(" ")[0].upper() == "FROM":
        n += 1
        open("%s.%d.Modelfile" % (sys.argv[2], n), "w", encoding="utf-8").write(b)
PY
    done
    for f in "$BATS_TEST_TMPDIR"/*.Modelfile; do
        n=$((n + 1))
        run "$MFC" check "$f"
        echo "$f: $output"
        [ "$status" -eq 0 ]
        [[ "$output" != *"warning:"* && "$output" != *" [1-9]* warning"* ]]
    done
    [ "$n" -ge 2 ]
}

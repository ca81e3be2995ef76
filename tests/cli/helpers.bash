# helpers.bash: shared setup for the bats CLI tests.
# MFC (the binary under test), MFC_SRCDIR and MFC_SHARED come from make check's
# environment; running a .bats file by hand falls back to the build tree.
: "${MFC:=$BATS_TEST_DIRNAME/../../mfc}"
: "${MFC_SRCDIR:=$BATS_TEST_DIRNAME/../..}"
: "${MFC_SHARED:=$MFC_SRCDIR/../shared}"

# Skips the current test, saying why, when ../shared is not beside the checkout.
require_shared() {
    [ -d "$MFC_SHARED/data" ] || skip "shared test data not found at $MFC_SHARED"
}

# Skips the current test, saying why, unless node and node-llama-cpp (the
# llama.cpp reference peer, tests/tools/node) are installed.
require_llama() {
    command -v node >/dev/null || skip "node is not installed"
    [ -d "$MFC_SRCDIR/tests/tools/node/node_modules/node-llama-cpp" ] ||
        skip "node-llama-cpp not installed (cd tests/tools/node && npm i)"
}

### docs/: the user docs and man pages, and docs.bats (links, the command index)
dist_man_MANS = docs/man/mfc.1 docs/man/Modelfile.5
TESTS += tests/cli/docs.bats
EXTRA_DIST += tests/cli/docs.bats \
	docs/getting-started.md docs/deploy.md docs/ci.md docs/troubleshooting.md docs/config.md \
	docs/api.md docs/architecture.md docs/cli.md docs/cuda.md docs/image.md \
	docs/store.md docs/tokenizer.md docs/families.md docs/grammar.md docs/spec.md

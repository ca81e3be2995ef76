## tests/e2e: the demo end to end — modelfiles/demo built, run by
## mfc run, under podman and through a registry, answers checked against
## modelfiles/demo/expected.json; README's quick start; every example Modelfile.
TESTS += tests/e2e/demo.bats
EXTRA_DIST += tests/e2e/demo.bats tests/e2e/ask.mjs
TESTS += tests/e2e/readme.bats
EXTRA_DIST += tests/e2e/readme.bats modelfiles/README.md modelfiles/llama3-lora/Modelfile \
	modelfiles/multi-adapter/Modelfile

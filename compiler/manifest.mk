### Deployment: `mfc manifest` (Kubernetes/Compose YAML for an image), the
### docker/ toolchain image and examples, the user docs and man pages
libmfc_compiler_a_SOURCES += compiler/manifest.c compiler/manifest.h compiler/cmd_manifest.c

check_PROGRAMS += tests/unit/test_manifest
tests_unit_test_manifest_SOURCES = tests/unit/test_manifest.c
tests_unit_test_manifest_CFLAGS = $(MFC_TEST_CFLAGS) $(YAML_CFLAGS)
tests_unit_test_manifest_LDADD = $(MFC_COMPILER_LIBS) $(CMOCKA_LIBS)
TESTS += tests/unit/test_manifest

dist_man_MANS = docs/man/mfc.1 docs/man/Modelfile.5

TESTS += tests/cli/manifest.bats tests/cli/docs.bats
EXTRA_DIST += tests/cli/manifest.bats tests/cli/docs.bats tests/cli/yaml_check.py \
	docker/Dockerfile docker/compose.yaml docker/kubernetes.yaml \
	docker/github-actions-example.yml docker/Dockerfile.dockerignore \
	docs/getting-started.md docs/deploy.md docs/ci.md docs/troubleshooting.md docs/config.md
## The user docs docs.bats reads (links, the command index) ship in the tarball too.
EXTRA_DIST += docs/api.md docs/architecture.md docs/cli.md docs/cuda.md docs/image.md \
	docs/store.md docs/tokenizer.md

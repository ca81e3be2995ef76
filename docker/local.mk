### docker/: the toolchain image and deployment examples (checked by docs.bats
### and manifest.bats)
EXTRA_DIST += docker/Dockerfile docker/compose.yaml docker/kubernetes.yaml \
	docker/github-actions-example.yml docker/Dockerfile.dockerignore

/*
 * manifest.h: deployment manifests for an image in the store.
 *
 * `mfc manifest IMAGE --kubernetes|--compose` turns what an image's config
 * says (the exposed port, its Env) into a Kubernetes Deployment + Service or
 * a Compose file that runs it with a GPU, probes on /health and Prometheus
 * scraping of /metrics (docs/deploy.md). The documents are built as JSON
 * (jansson) from oci_inspect()'s result and written as YAML through libyaml's
 * emitter, as plan_config.c writes model.yaml: deterministic, no folding.
 *
 * Nothing here touches the store or prints; functions return 0 or a negative
 * MF_E* code with err filled.
 */
#ifndef MFC_MANIFEST_H
#define MFC_MANIFEST_H

#include <stddef.h>

#include <stdint.h>

#include <jansson.h>

#include "common/err.h"

#define MANIFEST_NAME_MAX 64 /* a DNS-1123 label: 63 chars, plus NUL */

enum manifest_kind {
    MANIFEST_KUBERNETES, /* apps/v1 Deployment, then v1 Service */
    MANIFEST_COMPOSE,    /* one Compose file with one service */
};

struct manifest_opts {
    enum manifest_kind kind; /* what to write */
    const char *name;        /* borrowed: a DNS-1123 label (manifest_name_valid) */
    const char *image;       /* borrowed: the reference the cluster or engine pulls */
    const char *digest;      /* borrowed: the manifest digest (an annotation), or NULL */
    int port;                /* 1..65535; 0: the image's MFC_PORT, else its exposed port, else 8080 */
    int gpus;                /* nvidia.com/gpu per replica, 0..64; 0 asks for none; -1: one
                                when the image's runtime is CUDA (label dev.mfc.runtime) */
    int replicas;            /* Kubernetes replicas, 1.. */
    uint64_t model_bytes;    /* the weights' and adapters' layers: sizes the CPU and memory
                                requests (manifest_resources); 0: no requests */
};

/* What a replica asks for, from the model's bytes: memory is the weights
 * (mapped, so resident) plus a quarter for the KV cache and buffers plus
 * 512 MiB for the runtime, rounded up to 256 MiB; CPUs 1 per 2 GiB of weights
 * (decode reads every weight per token), 1 to 8. gpus as struct
 * manifest_opts says, resolved. */
struct manifest_resources {
    uint64_t memory_mib; /* requests and limits.memory, MiB */
    int cpus;            /* requests.cpu */
    int gpus;            /* limits nvidia.com/gpu, 0: none */
};
void manifest_resources(const json_t *image_config, const struct manifest_opts *o,
                        struct manifest_resources *r);

/* 1 when s is a DNS-1123 label (1..63 of [a-z0-9-], alphanumeric at both
 * ends), the rule Kubernetes applies to Deployment/Service/container names. */
int manifest_name_valid(const char *s);

/* A name for the image reference ref: its last path component without tag or
 * digest, lower-cased, other characters as '-', trimmed to a valid label;
 * "mfc" when nothing is left. out gets at most MANIFEST_NAME_MAX bytes. Cannot fail. */
void manifest_name_from_ref(const char *ref, char out[MANIFEST_NAME_MAX]);

/* The port the image serves on, from its config (oci_inspect's "config"
 * object): Env MFC_PORT when it is a valid port, else the first "N/tcp" of
 * ExposedPorts, else 8080. Cannot fail. */
int manifest_image_port(const json_t *image_config);

/* *docs = a new array of the documents for image_config (the image config
 * JSON: {"config": {"Env", "ExposedPorts", ...}}) and o: Deployment and
 * Service, or one Compose file. The image's Env (less PATH) is passed on,
 * MFC_PORT set to the port when o->port is given. MF_EINVAL names a bad
 * option (name, port, gpus, replicas); *docs is untouched on failure. */
int manifest_docs(const json_t *image_config, const struct manifest_opts *o, json_t **docs,
                  struct mf_err *err);

/* Writes docs (an array of objects) as one YAML stream, a document each,
 * through libyaml. Strings that YAML would read as another type ("8080",
 * "true", "8080:8080") are double-quoted, the rest plain where YAML allows.
 * *out is malloc'd and NUL-terminated (caller frees), *len its length;
 * untouched on failure (MF_ENOMEM, or MF_EINVAL for a nesting deeper than 16). */
int manifest_yaml(const json_t *docs, char **out, size_t *len, struct mf_err *err);

#endif

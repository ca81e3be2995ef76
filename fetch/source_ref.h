/*
 * source_ref.h: FROM and ADAPTER by name: a local mfc image, or a registry
 * reference (an mfc image, a Docker Model Runner or CNCF ModelPack artifact,
 * an Ollama manifest), turned into a GGUF blob in the store plus the
 * defaults the base carries (template, system, params, messages).
 *
 * How a name is looked up (docs/modelfile.md, "FROM and ADAPTER by name"):
 *   1. a tag or manifest digest in the local store ("llama3-lora",
 *      "llama3-lora:latest", "sha256:<hex>"); a name without a tag also
 *      tries ":latest";
 *   2. else a registry reference: a first component with a "." or ":" or
 *      "localhost" is a registry host ("127.0.0.1:5000/team/m:1",
 *      "docker.io/ai/smollm2"); anything else is an Ollama library name, as
 *      Ollama users expect: "llama3" -> registry.ollama.ai/library/llama3:latest,
 *      "ns/m:tag" -> registry.ollama.ai/ns/m:tag.
 *
 * Which layer is the model (source_ref_pick, by media type first):
 *   application/vnd.ollama.image.model | .adapter            raw GGUF
 *   application/vnd.docker.ai.gguf.v3 | .gguf.v3.lora          raw GGUF
 *   application/vnd.cncf.model.weight.v1.{raw,gguf} + *.gguf   raw GGUF
 *   application/vnd.cncf.model.weight.v1.tar + *.gguf          the file in the tar
 *   an OCI/Docker tar layer annotated org.cncf.model.filepath=*.gguf (mfc:
 *   /models/model.gguf is the model, /adapters/ *.gguf adapters, the draft
 *   is neither)                                                the file in the tar
 * A tar layer is kept as is, so an image built FROM it shares the layer.
 */
#ifndef MFC_SOURCE_REF_H
#define MFC_SOURCE_REF_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "common/err.h"
#include "registry/registry.h"
#include "store/store.h"

#define SOURCE_REF_OLLAMA_HOST "registry.ollama.ai"
#define SOURCE_REF_PATH_MAX 512 /* bytes of a filepath annotation we keep */
#define SOURCE_REF_TEXT_MAX (1u << 20) /* bytes of a template/system/params/messages layer */

/* What source_ref_pick chose from a manifest: layer indexes, -1 for none. */
struct source_ref_pick {
    int weight;                      /* the GGUF layer */
    int tar;                         /* nonzero: weight is a tar; the GGUF is member */
    char member[SOURCE_REF_PATH_MAX]; /* path in the tar, without a leading "/" */
    int config;                      /* mfc: the etc/mfc/model.yaml layer (tar+gzip) */
    int tmpl, system, params, messages; /* Ollama: the text/JSON layers */
    const char *format;              /* static: "mfc", "docker-model", "modelpack", "ollama", "oci" */
};

/* Chooses the model (adapter nonzero: the adapter) of a manifest's layers.
 * No GGUF layer is MF_ENOTFOUND; two candidates MF_EINVAL naming both
 * digests. Pure: reads only the JSON. */
int source_ref_pick(const json_t *manifest, int adapter, struct source_ref_pick *p,
                    struct mf_err *err);

/* What a name resolved to. Release with source_ref_result_fini. */
struct source_ref_result {
    char gguf[STORE_DIGEST_BUF];     /* the GGUF blob in the store */
    uint64_t gguf_size;              /* its bytes */
    char manifest[STORE_DIGEST_BUF]; /* the manifest it came from */
    struct store_desc layer;         /* the picked layer */
    int layer_tar;                   /* nonzero: layer is a tar holding the GGUF (reusable) */
    char filepath[SOURCE_REF_PATH_MAX + 1]; /* "/" + member, for a tar layer */
    json_t *defaults;                /* owned: {template?, system?, params?, messages?} */
    int transferred;                 /* nonzero: bytes were downloaded or extracted */
    char where[1100];                /* "the local image X" / "host/repo", for messages */
};

/* Resolves name (see above) into r. Blobs enter the store only verified;
 * nothing is tagged. A name found nowhere is MF_ENOTFOUND naming the store
 * and the registry that were tried. On failure r is zeroed (safe to fini). */
int source_ref_resolve(struct store *s, const char *name, int adapter,
                       const struct registry_opts *ro, struct source_ref_result *r,
                       struct mf_err *err);
void source_ref_result_fini(struct source_ref_result *r);

/* The registry reference a non-local name means ("llama3" ->
 * "registry.ollama.ai/library/llama3"). 0, or MF_EINVAL when it does not fit. */
int source_ref_remote(const char *name, char *out, size_t cap, struct mf_err *err);

/* YAML text (the subset plan_config_yaml writes) -> JSON; plain scalars that
 * read as integers, reals or booleans become those. NULL on error (err set). */
json_t *source_ref_yaml_json(const char *text, size_t len, struct mf_err *err);

#endif

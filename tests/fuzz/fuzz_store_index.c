/*
 * fuzz_store_index.c: libFuzzer target for the store's validation of OCI
 * JSON read back from disk (store/store_oci.c): index.json, manifests and
 * indexes of every media type gc follows, and the digest and tag grammars.
 *
 * Each input goes through all parsers; whatever they accept is checked
 * against the invariants the rest of the store relies on (every returned
 * digest valid, every media type NUL-terminated within its buffer), so a
 * validation gap shows up as an abort, not only as a memory error.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "store/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const types[] = {
    STORE_MT_OCI_MANIFEST,
    STORE_MT_OCI_INDEX,
    STORE_MT_DOCKER_MANIFEST,
    STORE_MT_DOCKER_LIST,
    "application/vnd.oci.image.layer.v1.tar",
};

static void check_index(const char *text, size_t size)
{
    json_t *index = NULL;
    if (store_oci_parse_index(text, size, "index.json", &index, NULL) != 0)
        return;
    size_t i;
    json_t *v;
    json_array_foreach (json_object_get(index, "manifests"), i, v) {
        struct store_desc d;
        if (store_oci_parse_desc(v, "fuzz", &d, NULL) != 0 || !store_digest_valid(d.digest))
            abort(); /* the index was accepted, so each descriptor must be */
    }
    json_decref(index);
}

static void check_refs(const char *text, size_t size)
{
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        struct store_desc *refs = NULL;
        size_t n = 0;
        if (store_oci_manifest_refs(text, size, types[t], "fuzz", &refs, &n, NULL) != 0)
            continue;
        for (size_t i = 0; i < n; i++)
            if (!store_digest_valid(refs[i].digest) ||
                !memchr(refs[i].media_type, '\0', sizeof refs[i].media_type))
                abort();
        free(refs);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0'; /* the grammars take C strings; the parsers take the length */
    check_index(text, size);
    check_refs(text, size);
    (void)store_digest_valid(text);
    (void)store_tag_valid(text);
    free(text);
    return 0;
}

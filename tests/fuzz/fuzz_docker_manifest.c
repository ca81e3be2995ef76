/*
 * fuzz_docker_manifest.c: libFuzzer target for `mfc load`'s check of a
 * docker archive's manifest.json (image/oci_docker.c): any bytes as the
 * document, against a fixed index of two images and a fixed member list;
 * it must answer 0 or MF_EFORMAT/MF_ENOMEM with a message, and accept only
 * documents that name those images through members of the archive.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image/oci.h"

#define HA "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define HB "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define HC "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
#define HD "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static char l1[2][STORE_DIGEST_BUF] = {"sha256:" HB, "sha256:" HC};
    static char l2[1][STORE_DIGEST_BUF] = {"sha256:" HC};
    struct oci_docker_image imgs[2] = {
        {.config = "sha256:" HA, .layers = l1, .n_layers = 2},
        {.config = "sha256:" HD, .layers = l2, .n_layers = 1},
    };
    static const char *const members[] = {"blobs/sha256/" HA, "blobs/sha256/" HB,
                                          "blobs/sha256/" HC, "blobs/sha256/" HD,
                                          "index.json",       "manifest.json"};
    char *text = malloc(size ? size : 1);
    struct mf_err err;
    if (!text)
        return 0;
    memcpy(text, data, size);
    size_t n_imgs = size && (data[0] & 1) ? 1 : 2;
    int rc = oci_docker_check(text, size, imgs, n_imgs, members, 6, &err);
    if (rc != 0 && ((rc != MF_EFORMAT && rc != MF_ENOMEM) || !err.msg[0]))
        abort();
    free(text);
    return 0;
}

/*
 * fuzz_registry.c: libFuzzer target for the registry client's parsers of
 * untrusted text (registry/registry.c, registry_auth.c): image references,
 * WWW-Authenticate challenges, auth files, base64.
 *
 * Whatever a parser accepts is checked against what the client relies on
 * (strings NUL-terminated in their buffers, a valid digest when one was
 * parsed, a Bearer challenge always with a realm, no CR/LF in values that
 * become request lines), so a validation gap aborts, not only a memory error.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "registry/registry.h"
#include "registry/registry_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_str(const char *s, size_t cap)
{
    const char *end = memchr(s, '\0', cap);
    if (!end || strpbrk(s, "\r\n"))
        abort();
}

static void check_ref(const char *text)
{
    struct registry_ref r;
    if (registry_ref_parse(text, &r, NULL) != 0)
        return;
    check_str(r.host, sizeof r.host);
    check_str(r.repo, sizeof r.repo);
    check_str(r.tag, sizeof r.tag);
    if (!r.repo[0] || !r.host[0] || (r.digest[0] && !store_digest_valid(r.digest)) ||
        (!r.tag[0] && !r.digest[0]) || strchr(r.repo, ':') || strchr(r.host, '/'))
        abort();
}

static void check_challenge(const char *text, size_t size)
{
    struct registry_challenge c;
    if (registry_challenge_parse(text, size, &c, NULL) != 0)
        return;
    check_str(c.scheme, sizeof c.scheme);
    check_str(c.realm, sizeof c.realm);
    check_str(c.service, sizeof c.service);
    check_str(c.scope, sizeof c.scope);
    if (strcasecmp(c.scheme, "Bearer") == 0 && !c.realm[0])
        abort();
}

static void check_auth(const char *text, size_t size)
{
    struct registry_cred c;
    char helper[64];
    if (registry_auth_parse(text, size, "x.io", &c, helper, NULL) == 0) {
        check_str(c.user, sizeof c.user);
        check_str(helper, sizeof helper);
        if (strchr(helper, '/'))
            abort(); /* a helper name becomes part of a program name */
    }
    char out[256];
    size_t n = 0;
    if (registry_b64_decode(text, size, out, sizeof out, &n, NULL) == 0 && n >= sizeof out)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    check_ref(text);
    check_challenge(text, size);
    check_auth(text, size);
    free(text);
    return 0;
}

/*
 * serve_grammar.c: the server's grammar state: the vocabulary trie (built
 * once at load from the tokenizer) and a small cache of compiled grammars
 * keyed by their GBNF text, so requests that repeat a schema or a tool set
 * (an agent's every turn) share one lazily built DFA and its token masks.
 *
 * The cache holds up to GCACHE_N grammars; a miss past that drops the least
 * recently used (requests still holding it keep their reference). One mutex
 * guards the table; compiling happens outside it, so a slow compile never
 * blocks other requests' lookups.
 */
#include "runtime/serve/serve_int.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/grammar/gram.h"

#define GCACHE_N 32

struct gentry {
    char *src;      /* owned */
    struct gram *g; /* a reference */
    uint64_t used;  /* tick of the last hit */
};

struct serve_gcache {
    pthread_mutex_t mu;
    struct gentry e[GCACHE_N];
    uint64_t tick;
};

int serve_gcache_open(struct serve *s, struct mf_err *err)
{
    /* the family's tool-call opening, where the vocabulary has it as a
     * control token, is how a forced call begins */
    const struct serve_toolfmt *f = serve_toolfmt_for(s->family);
    const char *const markers[] = {f->open[0] ? f->open : NULL, NULL};
    int rc = gram_vocab_new(s->tok, markers, &s->gvocab, err);
    if (rc)
        return rc;
    s->gcache = calloc(1, sizeof *s->gcache);
    if (!s->gcache)
        return mf_err_set(err, MF_ENOMEM, "out of memory");
    pthread_mutex_init(&s->gcache->mu, NULL);
    return 0;
}

void serve_gcache_close(struct serve *s)
{
    if (s->gcache) {
        for (int i = 0; i < GCACHE_N; i++) {
            free(s->gcache->e[i].src);
            gram_unref(s->gcache->e[i].g);
        }
        pthread_mutex_destroy(&s->gcache->mu);
        free(s->gcache);
        s->gcache = NULL;
    }
    gram_vocab_free(s->gvocab);
    s->gvocab = NULL;
}

int serve_gcache_get(struct serve *s, const char *src, struct gram **out, struct mf_err *err)
{
    struct serve_gcache *c = s->gcache;
    struct gram *g = NULL;
    *out = NULL;
    if (!c)
        return mf_err_set(err, MF_EINVAL, "grammars are not available on this server");
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < GCACHE_N; i++) {
        if (c->e[i].src && !strcmp(c->e[i].src, src)) {
            c->e[i].used = ++c->tick;
            *out = gram_ref(c->e[i].g);
            pthread_mutex_unlock(&c->mu);
            return 0;
        }
    }
    pthread_mutex_unlock(&c->mu);
    int rc = gram_new(src, strlen(src), s->gvocab, &g, err);
    if (rc)
        return rc == MF_ENOMEM ? rc : MF_EINVAL;
    char *copy = strdup(src);
    pthread_mutex_lock(&c->mu);
    int victim = 0;
    for (int i = 1; i < GCACHE_N; i++)
        if (c->e[i].used < c->e[victim].used)
            victim = i;
    if (copy) {
        free(c->e[victim].src);
        gram_unref(c->e[victim].g);
        c->e[victim] = (struct gentry){copy, gram_ref(g), ++c->tick};
    }
    pthread_mutex_unlock(&c->mu);
    *out = g;
    return 0;
}

/*
 * gram_dfa.c: the matcher. A grammar's pushdown automaton is run as a lazy
 * DFA whose states are sets of stacks, and each DFA state caches the token
 * mask the vocabulary trie gives it.
 *
 * Stacks are hash-consed nodes (position, parent): equal stacks are one id,
 * node 0 the empty stack. A stack's top is the element to match next; a
 * "closed" stack has a byte set on top (or is empty: the sentence may end
 * there). Closing a stack expands rule references on top (llama.cpp's
 * advance_stack, memoized per node); a reference last in its alternative
 * pushes no return position, so right recursion (x*) keeps stacks flat.
 * A DFA state is the sorted set of closed stacks after some input; its
 * transitions (256, allocated when first used) and its mask are computed
 * once. Per-request state is just a DFA state id.
 *
 * Invariants: state 0 is dead (no stack); node and state ids never change
 * once made, so a request's id stays valid while the grammar lives; masks
 * may be dropped (memory cap) and recomputed. One mutex guards everything.
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/grammar/gram.h"
#include "runtime/grammar/gram_int.h"

#define UNKNOWN UINT32_MAX
#define PLACE 1u             /* the stack node standing for an unknown context */
#define CORE_FRAMES 64       /* stack nodes above the context a core may keep */
#define CORE_MAX_UNSURE 8192 /* unsure tokens past which a core is not used */

struct node {
    uint32_t pos, parent;
    uint32_t depth;          /* nodes below it (the empty stack and PLACE: 0) */
    uint32_t clo_off, clo_n; /* closure list in g->pool; clo_off UNKNOWN until made */
};

struct dstate {
    uint32_t off, n; /* closed stacks in g->pool, ascending */
    uint32_t hash;
    uint8_t accept;    /* the empty stack is in the set */
    uint8_t cont;      /* a non-empty stack is */
    uint8_t ctx;       /* a core state: the context (PLACE) is in the set */
    uint8_t no_core;   /* a core whose unsure tokens are too many to be worth it */
    uint32_t core;     /* the state with every stack cut to CORE_FRAMES nodes; UNKNOWN
                          until computed; itself when no stack is deeper */
    uint32_t *unsure;  /* owned, a core state's: trie node ranges [a, b) of tokens
                          whose fate depends on the context */
    uint32_t n_unsure; /* entries (2 per range) */
    uint32_t *tr;      /* owned: 256 next states, UNKNOWN until computed; NULL: dead */
    uint32_t *mask;    /* owned: cached token mask, or NULL */
};

struct gram {
    atomic_int refs;
    pthread_mutex_t mu;
    struct gram_rules r;
    const struct gram_vocab *v; /* borrowed */
    struct node *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *nhash; /* open addressing: node ids, 0 empty */
    uint32_t nhash_cap;
    uint32_t *pool; /* closure lists and state sets */
    size_t n_pool, cap_pool;
    struct dstate *st;
    uint32_t n_st, cap_st;
    uint32_t *shash; /* open addressing: state ids, 0 empty */
    uint32_t shash_cap;
    uint32_t start; /* UNKNOWN until made */
    uint32_t *seen; /* per node: generation stamp of the last closure visit */
    uint32_t seen_cap, gen;
    uint32_t *work, *acc; /* scratch lists */
    size_t cap_work, cap_acc;
    uint32_t *walk;           /* per trie depth: DFA state */
    const uint32_t **walk_tr; /* per trie depth: that state's transitions */
    uint8_t *walk_ctx;        /* per trie depth: a core walk's path reached the context */
    size_t mask_bytes;
    uint32_t rep_cap; /* repetitions a core keeps: the longest token's bytes + 1 */
    struct gram_stats stats;
    struct mf_err broken; /* a limit was hit: every later call fails with this */
};

static uint32_t mix(uint32_t a, uint32_t b)
{
    uint64_t x = ((uint64_t)a << 32) ^ b;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (uint32_t)x;
}

static int limit(struct gram *g, struct mf_err *err, const char *what)
{
    if (!g->broken.code)
        mf_err_set(&g->broken, MF_ENOMEM,
                   "grammar: the output's states exceed the limit on %s; use a simpler grammar or "
                   "schema",
                   what);
    if (err)
        *err = g->broken;
    return MF_ENOMEM;
}

static int pool_reserve(struct gram *g, size_t more)
{
    if (g->n_pool + more <= g->cap_pool)
        return 0;
    size_t c = g->cap_pool ? g->cap_pool : 1024;
    while (c < g->n_pool + more)
        c *= 2;
    if (c > ((size_t)1 << 30))
        return -1;
    uint32_t *p = realloc(g->pool, c * sizeof *p);
    if (!p)
        return -1;
    g->pool = p;
    g->cap_pool = c;
    return 0;
}

static int list_push(uint32_t **v, size_t *n, size_t *cap, uint32_t x)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 64;
        uint32_t *p = realloc(*v, c * sizeof *p);
        if (!p)
            return -1;
        *v = p;
        *cap = c;
    }
    (*v)[(*n)++] = x;
    return 0;
}

/* ---- stack nodes ----------------------------------------------------------- */

static int nhash_grow(struct gram *g)
{
    uint32_t cap = g->nhash_cap ? g->nhash_cap * 2 : 1024;
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h)
        return -1;
    for (uint32_t id = 1; id < g->n_nodes; id++) {
        uint32_t i = mix(g->nodes[id].pos, g->nodes[id].parent) & (cap - 1);
        while (h[i])
            i = (i + 1) & (cap - 1);
        h[i] = id;
    }
    free(g->nhash);
    g->nhash = h;
    g->nhash_cap = cap;
    return 0;
}

/* The node (pos, parent), made if new; 0 on a limit (node 0 is never a
 * valid result here since pos is always set). */
static uint32_t intern_node(struct gram *g, uint32_t pos, uint32_t parent)
{
    if ((g->n_nodes + 1) * 2 > g->nhash_cap && nhash_grow(g))
        return 0;
    uint32_t i = mix(pos, parent) & (g->nhash_cap - 1);
    while (g->nhash[i]) {
        const struct node *n = &g->nodes[g->nhash[i]];
        if (n->pos == pos && n->parent == parent)
            return g->nhash[i];
        i = (i + 1) & (g->nhash_cap - 1);
    }
    if (g->n_nodes >= GRAM_MAX_NODES)
        return 0;
    if (g->n_nodes == g->cap_nodes) {
        uint32_t c = g->cap_nodes * 2;
        struct node *nn = realloc(g->nodes, (size_t)c * sizeof *nn);
        uint32_t *sn = realloc(g->seen, (size_t)c * sizeof *sn);
        if (sn)
            g->seen = sn;
        if (!nn || !sn) {
            if (nn)
                g->nodes = nn;
            return 0;
        }
        memset(g->seen + g->cap_nodes, 0, (size_t)(c - g->cap_nodes) * sizeof *sn);
        g->nodes = nn;
        g->cap_nodes = c;
    }
    uint32_t id = g->n_nodes++;
    g->nodes[id] = (struct node){pos, parent, g->nodes[parent].depth + 1, UNKNOWN, 0};
    g->nhash[i] = id;
    g->stats.nodes++;
    return id;
}

static int at_end(const struct gram *g, uint32_t pos)
{
    uint32_t k = g->r.el[pos].kind;
    return k == GEL_END || k == GEL_ALT;
}

/* The stack after the top of node id is matched: the next element of its
 * alternative, or (at its end) the parent. UNKNOWN on a limit. */
static uint32_t advance(struct gram *g, uint32_t id)
{
    const struct node n = g->nodes[id];
    if (at_end(g, n.pos + 1))
        return n.parent;
    uint32_t c = intern_node(g, n.pos + 1, n.parent);
    return c ? c : UNKNOWN;
}

/* Pushes rule's alternatives over continuation cont onto the work list. */
static int expand(struct gram *g, uint32_t rule, uint32_t cont, size_t *n_work)
{
    uint32_t a = g->r.start[rule];
    for (;;) {
        uint32_t s = at_end(g, a) ? cont : intern_node(g, a, cont);
        if (!s && !at_end(g, a))
            return -1;
        if (list_push(&g->work, n_work, &g->cap_work, s))
            return -1;
        while (!at_end(g, a))
            a++;
        if (g->r.el[a].kind == GEL_END)
            return 0;
        a++;
    }
}

/* The closed stacks node id leads to (itself when a byte set is on top),
 * as a list in the pool (unsorted, unique). -1 on a limit. */
static int closure(struct gram *g, uint32_t id, uint32_t *off, uint32_t *n)
{
    if (id && g->nodes[id].clo_off != UNKNOWN) {
        *off = g->nodes[id].clo_off;
        *n = g->nodes[id].clo_n;
        return 0;
    }
    size_t n_work = 0, n_acc = 0;
    if (++g->gen == 0) {
        memset(g->seen, 0, (size_t)g->cap_nodes * sizeof *g->seen);
        g->gen = 1;
    }
    if (list_push(&g->work, &n_work, &g->cap_work, id))
        return -1;
    int accept_seen = 0;
    while (n_work) {
        uint32_t x = g->work[--n_work];
        if (x == 0 || x == PLACE) { /* the sentence may end / the context goes on */
            if (x == 0 && !accept_seen && list_push(&g->acc, &n_acc, &g->cap_acc, 0))
                return -1;
            if (x == PLACE && g->seen[PLACE] != g->gen &&
                list_push(&g->acc, &n_acc, &g->cap_acc, PLACE))
                return -1;
            accept_seen |= x == 0;
            g->seen[x] = g->gen;
            continue;
        }
        if (g->seen[x] == g->gen)
            continue;
        g->seen[x] = g->gen;
        const struct gel *e = &g->r.el[g->nodes[x].pos];
        if (e->kind == GEL_SET) {
            if (list_push(&g->acc, &n_acc, &g->cap_acc, x))
                return -1;
            continue;
        }
        uint32_t cont = advance(g, x);
        if (cont == UNKNOWN || expand(g, e->v, cont, &n_work))
            return -1;
    }
    if (pool_reserve(g, n_acc))
        return -1;
    *off = (uint32_t)g->n_pool;
    *n = (uint32_t)n_acc;
    memcpy(g->pool + g->n_pool, g->acc, n_acc * sizeof *g->acc);
    g->n_pool += n_acc;
    if (g->n_pool > UINT32_MAX / 2)
        return -1;
    if (id) {
        g->nodes[id].clo_off = *off;
        g->nodes[id].clo_n = *n;
    }
    return 0;
}

/* ---- DFA states --------------------------------------------------------------- */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static int shash_grow(struct gram *g)
{
    uint32_t cap = g->shash_cap ? g->shash_cap * 2 : 1024;
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h)
        return -1;
    for (uint32_t id = 1; id < g->n_st; id++) {
        uint32_t i = g->st[id].hash & (cap - 1);
        while (h[i])
            i = (i + 1) & (cap - 1);
        h[i] = id;
    }
    free(g->shash);
    g->shash = h;
    g->shash_cap = cap;
    return 0;
}

/* The state for the set acc[0..n) (sorted here, deduplicated): GRAM_DEAD
 * for the empty set, UNKNOWN on a limit. */
static uint32_t intern_state(struct gram *g, uint32_t *set, size_t n)
{
    if (n == 0)
        return GRAM_DEAD;
    qsort(set, n, sizeof *set, cmp_u32);
    size_t k = 1;
    for (size_t i = 1; i < n; i++)
        if (set[i] != set[k - 1])
            set[k++] = set[i];
    n = k;
    uint32_t h = 0x9e3779b9u;
    for (size_t i = 0; i < n; i++)
        h = mix(h, set[i]);
    if ((g->n_st + 1) * 2 > g->shash_cap && shash_grow(g))
        return UNKNOWN;
    uint32_t i = h & (g->shash_cap - 1);
    while (g->shash[i]) {
        const struct dstate *s = &g->st[g->shash[i]];
        if (s->hash == h && s->n == n && memcmp(g->pool + s->off, set, n * sizeof *set) == 0)
            return g->shash[i];
        i = (i + 1) & (g->shash_cap - 1);
    }
    uint32_t *tr = malloc(256 * sizeof *tr);
    if (!tr || g->n_st >= GRAM_MAX_STATES || pool_reserve(g, n)) {
        free(tr);
        return UNKNOWN;
    }
    memset(tr, 0xff, 256 * sizeof *tr);
    if (g->n_st == g->cap_st) {
        uint32_t c = g->cap_st * 2;
        struct dstate *ns = realloc(g->st, (size_t)c * sizeof *ns);
        if (!ns) {
            free(tr);
            return UNKNOWN;
        }
        g->st = ns;
        g->cap_st = c;
    }
    uint32_t id = g->n_st++;
    struct dstate *s = &g->st[id];
    memset(s, 0, sizeof *s);
    s->off = (uint32_t)g->n_pool;
    s->n = (uint32_t)n;
    s->hash = h;
    s->tr = tr;
    s->accept = set[0] == 0;
    s->cont = set[n - 1] > PLACE;
    s->ctx = set[0] == PLACE || (n > 1 && set[1] == PLACE);
    s->core = UNKNOWN;
    memcpy(g->pool + g->n_pool, set, n * sizeof *set);
    g->n_pool += n;
    g->shash[i] = id;
    g->stats.states++;
    return id;
}

/* The state after byte b from state s (computed and stored on first use). */
static uint32_t step_slow(struct gram *g, uint32_t s, unsigned b)
{
    if (!g->st[s].tr) { /* the dead state: nothing leads out */
        return GRAM_DEAD;
    }
    /* the candidate set is gathered in a private buffer: closure() reuses
       g->acc and the pool may move */
    uint32_t *set = NULL;
    size_t n = 0, cap = 0;
    uint32_t off = g->st[s].off, cnt = g->st[s].n, res = UNKNOWN;
    for (uint32_t i = 0; i < cnt; i++) {
        uint32_t id = g->pool[off + i], c_off, c_n;
        if (id <= PLACE)
            continue;
        const struct gel *e = &g->r.el[g->nodes[id].pos];
        if (!gram_set_has(g->r.sets[e->v], b))
            continue;
        uint32_t next = advance(g, id);
        if (next == UNKNOWN || closure(g, next, &c_off, &c_n))
            goto out;
        for (uint32_t k = 0; k < c_n; k++) {
            if (list_push(&set, &n, &cap, g->pool[c_off + k]))
                goto out;
        }
    }
    res = intern_state(g, set, n);
    if (res != UNKNOWN)
        g->st[s].tr[b] = res;
out:
    free(set);
    return res;
}

static inline uint32_t step(struct gram *g, uint32_t s, unsigned b)
{
    const uint32_t *tr = g->st[s].tr;
    if (tr && tr[b] != UNKNOWN)
        return tr[b];
    return step_slow(g, s, b);
}

/* ---- lifecycle ------------------------------------------------------------------ */

int gram_new(const char *src, size_t len, const struct gram_vocab *v, struct gram **out,
             struct mf_err *err)
{
    struct gram *g = calloc(1, sizeof *g);
    int rc;

    *out = NULL;
    if (!g)
        return mf_err_set(err, MF_ENOMEM, "grammar: out of memory");
    if ((rc = gram_rules_parse(src, len, &g->r, err))) {
        free(g);
        return rc;
    }
    atomic_init(&g->refs, 1);
    pthread_mutex_init(&g->mu, NULL);
    g->v = v;
    g->start = UNKNOWN;
    g->rep_cap = v ? v->max_depth + 1 : UINT32_MAX;
    g->cap_nodes = 1024;
    g->nodes = malloc(g->cap_nodes * sizeof *g->nodes);
    g->seen = calloc(g->cap_nodes, sizeof *g->seen);
    g->cap_st = 256;
    g->st = calloc(g->cap_st, sizeof *g->st);
    g->walk = v ? malloc(((size_t)v->max_depth + 2) * sizeof *g->walk) : NULL;
    g->walk_tr = v ? malloc(((size_t)v->max_depth + 2) * sizeof *g->walk_tr) : NULL;
    g->walk_ctx = v ? malloc((size_t)v->max_depth + 2) : NULL;
    if (!g->nodes || !g->seen || !g->st || (v && (!g->walk || !g->walk_tr || !g->walk_ctx))) {
        gram_unref(g);
        return mf_err_set(err, MF_ENOMEM, "grammar: out of memory");
    }
    g->nodes[0] = (struct node){UNKNOWN, 0, 0, UNKNOWN, 0};     /* the empty stack */
    g->nodes[PLACE] = (struct node){UNKNOWN, 0, 0, UNKNOWN, 0}; /* an unknown context */
    g->n_nodes = 2;
    g->n_st = 1; /* state 0: dead */
    *out = g;
    return 0;
}

int32_t gram_n_vocab(const struct gram *g)
{
    return g->v ? g->v->n_vocab : 0;
}

struct gram *gram_ref(struct gram *g)
{
    atomic_fetch_add(&g->refs, 1);
    return g;
}

void gram_unref(struct gram *g)
{
    if (!g || atomic_fetch_sub(&g->refs, 1) != 1)
        return;
    for (uint32_t i = 0; i < g->n_st; i++) {
        free(g->st[i].tr);
        free(g->st[i].mask);
        free(g->st[i].unsure);
    }
    free(g->st);
    free(g->shash);
    free(g->nodes);
    free(g->nhash);
    free(g->pool);
    free(g->seen);
    free(g->work);
    free(g->acc);
    free(g->walk);
    free(g->walk_tr);
    free(g->walk_ctx);
    gram_rules_free(&g->r);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

/* ---- matching --------------------------------------------------------------------- */

static uint32_t start_locked(struct gram *g, struct mf_err *err)
{
    if (g->broken.code) {
        limit(g, err, "");
        return GRAM_DEAD;
    }
    if (g->start != UNKNOWN)
        return g->start;
    uint32_t *set = NULL;
    size_t n = 0, cap = 0;
    uint32_t a = g->r.start[g->r.root], res = UNKNOWN;
    for (;;) {
        uint32_t id = at_end(g, a) ? 0 : intern_node(g, a, 0), c_off, c_n;
        if (!at_end(g, a) && !id)
            goto out;
        if (closure(g, id, &c_off, &c_n))
            goto out;
        for (uint32_t k = 0; k < c_n; k++)
            if (list_push(&set, &n, &cap, g->pool[c_off + k]))
                goto out;
        while (!at_end(g, a))
            a++;
        if (g->r.el[a].kind == GEL_END)
            break;
        a++;
    }
    res = intern_state(g, set, n);
out:
    free(set);
    if (res == UNKNOWN) {
        limit(g, err, "stack nodes and states");
        return GRAM_DEAD;
    }
    g->start = res;
    return res;
}

uint32_t gram_start(struct gram *g, struct mf_err *err)
{
    pthread_mutex_lock(&g->mu);
    uint32_t s = start_locked(g, err);
    pthread_mutex_unlock(&g->mu);
    return s;
}

static uint32_t feed_locked(struct gram *g, uint32_t st, const unsigned char *p, size_t n,
                            struct mf_err *err)
{
    for (size_t i = 0; i < n && st != GRAM_DEAD; i++) {
        st = step(g, st, p[i]);
        if (st == UNKNOWN) {
            limit(g, err, "stack nodes and states");
            return GRAM_DEAD;
        }
    }
    return st;
}

uint32_t gram_feed(struct gram *g, uint32_t st, const void *bytes, size_t n, struct mf_err *err)
{
    pthread_mutex_lock(&g->mu);
    st = st < g->n_st ? feed_locked(g, st, bytes, n, err) : GRAM_DEAD;
    pthread_mutex_unlock(&g->mu);
    return st;
}

uint32_t gram_feed_token(struct gram *g, uint32_t st, int32_t id, struct mf_err *err)
{
    const struct gram_vocab *v = g->v;
    if (!v || id < 0 || id >= v->n_vocab)
        return GRAM_DEAD;
    pthread_mutex_lock(&g->mu);
    if (st >= g->n_st) {
        st = GRAM_DEAD;
    } else if (v->kind[id] == GRAM_TOK_EOG) {
        st = g->st[st].accept ? st : GRAM_DEAD;
    } else if (v->kind[id] == GRAM_TOK_NEVER) {
        st = GRAM_DEAD;
    } else {
        st = feed_locked(g, st, (const unsigned char *)v->pieces + v->piece_off[id],
                         v->piece_off[id + 1] - v->piece_off[id], err);
    }
    pthread_mutex_unlock(&g->mu);
    return st;
}

int gram_accepting(struct gram *g, uint32_t st)
{
    pthread_mutex_lock(&g->mu);
    int r = st < g->n_st && g->st[st].accept;
    pthread_mutex_unlock(&g->mu);
    return r;
}

int gram_can_continue(struct gram *g, uint32_t st)
{
    pthread_mutex_lock(&g->mu);
    int r = st < g->n_st && g->st[st].cont;
    pthread_mutex_unlock(&g->mu);
    return r;
}

/* ---- masks ------------------------------------------------------------------------- */

/* One forward pass over the trie in preorder: a node whose byte leads the
 * parent's state nowhere skips its whole subtree. */
static int walk(struct gram *g, uint32_t s0, uint32_t *mask)
{
    const struct gram_vocab *v = g->v;
    uint32_t *st = g->walk;
    const uint32_t **tr = g->walk_tr; /* per depth: the state's transitions (never move) */
    const struct gram_tnode *nodes = v->nodes;
    size_t visits = 0, n = v->n_nodes;
    st[0] = s0;
    tr[0] = g->st[s0].tr;
    if (!tr[0])
        return 0; /* dead: nothing */
    for (size_t i = 0; i < n;) {
        const struct gram_tnode nd = nodes[i];
        uint32_t t = tr[nd.depth - 1][nd.byte];
        visits++;
        if (t == UNKNOWN) {
            t = step_slow(g, st[nd.depth - 1], nd.byte);
            if (t == UNKNOWN)
                return -1;
        }
        if (t == GRAM_DEAD) {
            i = nd.next;
            continue;
        }
        st[nd.depth] = t;
        tr[nd.depth] = g->st[t].tr;
        if (nd.tok >= 0) {
            mask[(uint32_t)nd.tok >> 5] |= 1u << (nd.tok & 31);
            for (uint32_t k = v->tok_off[i] + 1; nd.more && k < v->tok_off[i + 1]; k++) {
                uint32_t id = (uint32_t)v->tok_ids[k];
                mask[id >> 5] |= 1u << (id & 31);
            }
        }
        i++;
    }
    if (g->st[s0].accept) {
        for (int32_t k = 0; k < v->n_eog; k++) {
            uint32_t id = (uint32_t)v->eog[k];
            mask[id >> 5] |= 1u << (id & 31);
        }
    }
    g->stats.trie_visits += visits;
    return 0;
}

/* ---- cores: masks shared across contexts ------------------------------------------------
 *
 * Most tokens' fate is decided by the frames above the context all of a
 * state's stacks share (inside a string: the string's own rules), not by
 * what encloses them. A state's core replaces that shared context by PLACE,
 * a node standing for any context; popping into it yields the PLACE marker. A walk over the
 * core gives the tokens allowed whatever the context (their bytes are used
 * up inside the frames, or right as they pop) and, as trie node ranges, the
 * "unsure" ones: dead in the core after a prefix reached the context. A
 * state's mask is then its core's sure mask, plus each unsure token fed
 * through the state itself. Cores are shared by every state with the same
 * top frames: a string in one object and in another, at any depth. */

/* The nearest node below both a and b (or one of them). */
static uint32_t meet(const struct gram *g, uint32_t a, uint32_t b)
{
    while (g->nodes[a].depth > g->nodes[b].depth)
        a = g->nodes[a].parent;
    while (g->nodes[b].depth > g->nodes[a].depth)
        b = g->nodes[b].parent;
    while (a != b) {
        a = g->nodes[a].parent;
        b = g->nodes[b].parent;
    }
    return a;
}

/* pos, or where it would be with at most g->rep_cap more repetitions: a
 * token of b bytes takes at most b more, so O_k and O_cap with k > cap =
 * (the longest token) + 1 allow the same tokens, and a core may use O_cap. */
static uint32_t rep_canon(const struct gram *g, uint32_t pos)
{
    uint32_t r = g->r.rule_of[pos], k = g->r.rep_k[r];
    if (k <= g->rep_cap)
        return pos;
    uint32_t rc = r - (k - g->rep_cap);
    return pos - g->r.start[r] + g->r.start[rc];
}

/* id with the context node j replaced by PLACE: its frames above j rebuilt
 * over PLACE (bounded repetitions capped, rep_canon). UNKNOWN on a limit. */
static uint32_t cut(struct gram *g, uint32_t id, uint32_t j)
{
    uint32_t chain[CORE_FRAMES], n = 0;
    while (id != j) {
        if (n == CORE_FRAMES || id <= PLACE)
            return UNKNOWN;
        chain[n++] = id;
        id = g->nodes[id].parent;
    }
    uint32_t c = PLACE;
    while (n--) {
        c = intern_node(g, rep_canon(g, g->nodes[chain[n]].pos), c);
        if (!c)
            return UNKNOWN;
    }
    return c;
}

/* st's core: every stack with the context they all share (the nearest
 * node below every one; not one of them) replaced by PLACE. st itself when
 * they share none (the root: an empty stack among them, or stacks of
 * unrelated contexts), when the frames above it are too many, or on a limit. */
static uint32_t core_of(struct gram *g, uint32_t st)
{
    if (g->st[st].core != UNKNOWN)
        return g->st[st].core;
    uint32_t off = g->st[st].off, n = g->st[st].n, j = g->pool[off];
    for (uint32_t i = 1; i < n && j > PLACE; i++)
        j = meet(g, j, g->pool[off + i]);
    for (uint32_t i = 0; i < n && j > PLACE; i++) /* a stack itself is not context */
        if (g->pool[off + i] == j)
            j = g->nodes[j].parent, i = (uint32_t)-1;
    uint32_t cs = st;
    uint32_t *set = j > PLACE ? malloc(n * sizeof *set) : NULL;
    if (set) {
        uint32_t i;
        for (i = 0; i < n; i++) {
            set[i] = cut(g, g->pool[g->st[st].off + i], j);
            if (set[i] == UNKNOWN)
                break;
        }
        if (i == n) {
            cs = intern_state(g, set, n);
            if (cs == UNKNOWN)
                cs = st;
        }
        free(set);
    }
    g->st[st].core = cs;
    if (cs != st)
        g->st[cs].core = cs;
    return cs;
}

/* The sure mask of core state cs into mask and its unsure node ranges
 * into g->st[cs].unsure. -1 on a limit or out of memory. */
static int walk_core(struct gram *g, uint32_t cs, uint32_t *mask)
{
    const struct gram_vocab *v = g->v;
    uint32_t *st = g->walk;
    const uint32_t **tr = g->walk_tr;
    uint8_t *ctx = g->walk_ctx; /* per depth: a state on the path held PLACE */
    const struct gram_tnode *nodes = v->nodes;
    size_t visits = 0, n = v->n_nodes, n_uns = 0, cap = 0, toks = 0;
    uint32_t *uns = NULL;
    st[0] = cs;
    tr[0] = g->st[cs].tr;
    ctx[0] = g->st[cs].ctx;
    for (size_t i = 0; tr[0] && i < n;) {
        const struct gram_tnode nd = nodes[i];
        uint32_t t = tr[nd.depth - 1][nd.byte];
        visits++;
        if (t == UNKNOWN) {
            t = step_slow(g, st[nd.depth - 1], nd.byte);
            if (t == UNKNOWN) {
                free(uns);
                return -1;
            }
        }
        if (t == GRAM_DEAD) {
            if (ctx[nd.depth - 1]) { /* the context might have taken this byte */
                if (list_push(&uns, &n_uns, &cap, (uint32_t)i) ||
                    list_push(&uns, &n_uns, &cap, nd.next)) {
                    free(uns);
                    return -1;
                }
                toks += v->tok_off[nd.next] - v->tok_off[i];
            }
            i = nd.next;
            continue;
        }
        st[nd.depth] = t;
        tr[nd.depth] = g->st[t].tr;
        ctx[nd.depth] = ctx[nd.depth - 1] | g->st[t].ctx;
        if (nd.tok >= 0) {
            mask[(uint32_t)nd.tok >> 5] |= 1u << (nd.tok & 31);
            for (uint32_t k = v->tok_off[i] + 1; nd.more && k < v->tok_off[i + 1]; k++) {
                uint32_t id = (uint32_t)v->tok_ids[k];
                mask[id >> 5] |= 1u << (id & 31);
            }
        }
        i++;
    }
    g->stats.trie_visits += visits;
    free(g->st[cs].unsure);
    g->st[cs].unsure = uns;
    g->st[cs].n_unsure = (uint32_t)n_uns;
    g->st[cs].no_core = toks > CORE_MAX_UNSURE || g->st[cs].ctx;
    return 0;
}

/* st's mask from its core's: the sure tokens, then each unsure one fed
 * through st. -1 on a limit. */
static int resolve_unsure(struct gram *g, uint32_t st, uint32_t cs, uint32_t *mask)
{
    const struct gram_vocab *v = g->v;
    for (uint32_t r = 0; r + 1 < g->st[cs].n_unsure; r += 2) {
        uint32_t a = g->st[cs].unsure[r], b = g->st[cs].unsure[r + 1];
        for (uint32_t k = v->tok_off[a]; k < v->tok_off[b]; k++) {
            int32_t id = v->tok_ids[k];
            const unsigned char *p = (const unsigned char *)v->pieces + v->piece_off[id];
            uint32_t s = st;
            for (uint32_t j = 0; j < v->piece_off[id + 1] - v->piece_off[id] && s != GRAM_DEAD;
                 j++) {
                s = step(g, s, p[j]);
                if (s == UNKNOWN)
                    return -1;
            }
            if (s != GRAM_DEAD)
                mask[(uint32_t)id >> 5] |= 1u << (id & 31);
        }
    }
    if (g->st[st].accept) {
        for (int32_t k = 0; k < v->n_eog; k++) {
            uint32_t id = (uint32_t)v->eog[k];
            mask[id >> 5] |= 1u << (id & 31);
        }
    }
    return 0;
}

/* st's mask into m (zeroed): through its core when that pays, else a walk. */
static int build_mask(struct gram *g, uint32_t st, uint32_t *m, size_t words)
{
    uint32_t cs = core_of(g, st);
    if (cs == UNKNOWN)
        return -1;
    if (cs == st || g->st[cs].no_core || g->st[cs].ctx)
        return walk(g, st, m);
    if (!g->st[cs].mask) { /* the core's sure mask, kept like any mask */
        uint32_t *cm = calloc(words, sizeof *cm);
        if (!cm || walk_core(g, cs, cm)) {
            free(cm);
            return -1;
        }
        g->st[cs].mask = cm;
        g->mask_bytes += words * sizeof *cm;
        g->stats.mask_builds++;
        if (g->st[cs].no_core)
            return walk(g, st, m);
    } else {
        g->stats.mask_hits++;
    }
    memcpy(m, g->st[cs].mask, words * sizeof *m);
    g->stats.core_masks++;
    return resolve_unsure(g, st, cs, m);
}

/* The cached mask of st, computed on a miss; NULL with err on failure. */
static const uint32_t *mask_locked(struct gram *g, uint32_t st, struct mf_err *err)
{
    if (!g->v) {
        mf_err_set(err, MF_EINVAL, "grammar: no vocabulary to compute token masks over");
        return NULL;
    }
    if (g->broken.code || st >= g->n_st) {
        if (st >= g->n_st)
            mf_err_set(err, MF_EINVAL, "grammar: state %u does not exist", st);
        else
            limit(g, err, "");
        return NULL;
    }
    if (g->st[st].mask) {
        g->stats.mask_hits++;
        return g->st[st].mask;
    }
    size_t words = ((size_t)g->v->n_vocab + 31) / 32, bytes = words * sizeof(uint32_t);
    if (g->mask_bytes + bytes > GRAM_MASK_CACHE_BYTES) { /* drop them all: recomputed on use */
        for (uint32_t i = 0; i < g->n_st; i++) {
            free(g->st[i].mask);
            g->st[i].mask = NULL;
        }
        g->mask_bytes = 0;
    }
    uint32_t *m = calloc(words, sizeof *m);
    if (!m || build_mask(g, st, m, words)) {
        free(m);
        if (!m)
            mf_err_set(err, MF_ENOMEM, "grammar: out of memory for a token mask");
        else
            limit(g, err, "stack nodes and states");
        return NULL;
    }
    g->st[st].mask = m;
    g->mask_bytes += bytes;
    g->stats.mask_builds++;
    return m;
}

int gram_mask(struct gram *g, uint32_t st, uint32_t *words, struct mf_err *err)
{
    pthread_mutex_lock(&g->mu);
    const uint32_t *m = mask_locked(g, st, err);
    if (m)
        memcpy(words, m, ((size_t)g->v->n_vocab + 31) / 32 * sizeof *words);
    pthread_mutex_unlock(&g->mu);
    return m ? 0 : err->code;
}

int gram_apply(struct gram *g, uint32_t st, float *logits, int32_t n_vocab, struct mf_err *err)
{
    pthread_mutex_lock(&g->mu);
    const uint32_t *m = mask_locked(g, st, err);
    if (m) {
        int32_t n = n_vocab < g->v->n_vocab ? n_vocab : g->v->n_vocab;
        for (int32_t w = 0; w * 32 < n; w++) {
            uint32_t bits = m[w];
            if (bits == UINT32_MAX)
                continue;
            int32_t end = w * 32 + 32 < n ? w * 32 + 32 : n;
            for (int32_t i = w * 32; i < end; i++)
                if (!((bits >> (i & 31)) & 1u))
                    logits[i] = -INFINITY;
        }
        for (int32_t i = n; i < n_vocab; i++) /* ids past the vocabulary: never */
            logits[i] = -INFINITY;
    }
    pthread_mutex_unlock(&g->mu);
    return m ? 0 : err->code;
}

void gram_drop_masks(struct gram *g)
{
    pthread_mutex_lock(&g->mu);
    for (uint32_t i = 0; i < g->n_st; i++) {
        free(g->st[i].mask);
        g->st[i].mask = NULL;
    }
    g->mask_bytes = 0;
    pthread_mutex_unlock(&g->mu);
}

void gram_stats(struct gram *g, struct gram_stats *out)
{
    pthread_mutex_lock(&g->mu);
    *out = g->stats;
    pthread_mutex_unlock(&g->mu);
}

/*
 * modelfile_flags.c: mfc's Dockerfile-style flags: on FROM/ADAPTER/DRAFT
 * (--checksum, and --name/--scale/--merge on ADAPTER), digest pins
 * (ref@sha256:HEX), and RUN's --network, --mount, --timeout and --user with its
 * shell or exec (JSON array) command.
 *
 * A flag is a blank-separated token starting with "--". On FROM, ADAPTER
 * and DRAFT flags may stand before or after the reference, whose inner
 * blanks are kept (Ollama reads `FROM /a b` as the path "/a b"); a quoted
 * value has no flags at all. On RUN flags stand before the command. Every
 * check reports at the flag's column and names the flag. Owns nothing.
 */
#include "compiler/modelfile_int.h"

#include <math.h>
#include <string.h>

#include "common/json.h"
#include "common/num.h"

struct tok {
    size_t off; /* byte offset in the raw value */
    size_t len; /* bytes */
};

/* Splits s into blank-separated tokens (t NULL: only counts them). */
static size_t tokens(const char *s, struct tok *t)
{
    size_t n = 0, i = 0;
    for (;;) {
        while (s[i] == ' ' || s[i] == '\t')
            i++;
        if (!s[i])
            return n;
        if (t)
            t[n].off = i;
        while (s[i] && s[i] != ' ' && s[i] != '\t')
            i++;
        if (t)
            t[n].len = i - t[n].off;
        n++;
    }
}

/* The tokens of s in the arena, and zeroed flags for each (either may be
 * NULL when s has no token). Returns 0, or -1 when memory ran out. */
static int tokenize(struct mf_modelfile_parser *p, const char *s, struct tok **t,
                    struct mf_flag **fl, size_t *n)
{
    *n = tokens(s, NULL);
    *t = *n ? mf_modelfile_alloc(p->arena, *n * sizeof **t) : NULL;
    *fl = *n ? mf_modelfile_alloc(p->arena, *n * sizeof **fl) : NULL;
    if (*n && (!*t || !*fl))
        return p->oom = 1, -1;
    if (*n)
        tokens(s, *t);
    return 0;
}

static int is_flag(const char *s, const struct tok *t)
{
    return t->len >= 2 && s[t->off] == '-' && s[t->off + 1] == '-';
}

static int flag_error(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                      const struct tok *t, const char *hint, const char *msg)
{
    mf_modelfile_diag(p, MF_DIAG_ERROR, c->val_line, mf_modelfile_col_at(c, t->off),
                      (int)t->len, hint, "%s", msg);
    return -1;
}

/* Splits "--name=value" into the flag (name, value or NULL; value expanded). */
static int split_flag(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                      const struct tok *t, struct mf_flag *f)
{
    const char *s = c->raw + t->off + 2;
    size_t n = t->len - 2;
    const char *eq = memchr(s, '=', n);
    size_t nl = eq ? (size_t)(eq - s) : n;
    f->name = mf_modelfile_strndup(p->arena, s, nl);
    f->value = eq ? mf_modelfile_strndup(p->arena, eq + 1, n - nl - 1) : NULL;
    if (!f->name || (eq && !f->value)) {
        p->oom = 1;
        return -1;
    }
    if (f->value && p->vars_active)
        return mf_modelfile_expand(p, c, f->value, t->off + 3 + nl, &f->value, NULL);
    return 0;
}

/* Whether flag f (already split) may be used, valued as it must be. */
static int check_flag_shape(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                            const struct tok *t, const struct mf_flag *f,
                            const char *const *names, size_t n, const char *usage)
{
    size_t i = 0;
    while (i < n && strcmp(names[i], f->name) != 0)
        i++;
    if (i == n && c->kind != MF_INSTR_ADAPTER && c->kind != MF_INSTR_RUN &&
        (!strcmp(f->name, "name") || !strcmp(f->name, "scale") || !strcmp(f->name, "merge")))
        return flag_error(p, c, t, usage,
                          mf_modelfile_fmt(p, "--%s is only for ADAPTER", f->name));
    if (i == n) {
        const char *best = mf_modelfile_suggest(f->name, names, n);
        return flag_error(p, c, t,
                          best ? mf_modelfile_fmt(p, "did you mean --%s? (%s)", best, usage)
                               : usage,
                          mf_modelfile_fmt(p, "unknown flag --%s for %s", f->name,
                                           mf_modelfile_kind_name(c->kind)));
    }
    int bare = strcmp(f->name, "merge") == 0;
    if (bare && f->value)
        return flag_error(p, c, t, "write --merge alone", "--merge takes no value");
    if (!bare && (!f->value || !f->value[0]))
        return flag_error(p, c, t, mf_modelfile_fmt(p, "write --%s=VALUE", f->name),
                          mf_modelfile_fmt(p, "flag --%s needs a value", f->name));
    return 0;
}

/* "sha256:" and 64 hex digits; *out gets it lower-cased. */
static int digest_ok(struct mf_modelfile_parser *p, const char *s, const char **out)
{
    if (strncmp(s, "sha256:", 7) != 0 || strlen(s) != 71)
        return 0;
    char *d = mf_modelfile_strndup(p->arena, s, 71);
    if (!d)
        return p->oom = 1, 0;
    for (size_t i = 7; i < 71; i++) {
        char ch = d[i];
        if (ch >= 'A' && ch <= 'F')
            d[i] = (char)(ch - 'A' + 'a');
        else if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f')))
            return 0;
    }
    *out = d;
    return 1;
}

/* An adapter name: a letter or '_', then letters, digits, '_', '-', '.'. */
static int adapter_name_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64 || !mf_modelfile_var_name_ok(s, 1))
        return 0;
    for (size_t i = 1; i < n; i++)
        if (!mf_modelfile_var_name_ok(s + i, 1) && !(s[i] >= '0' && s[i] <= '9') &&
            s[i] != '-' && s[i] != '.')
            return 0;
    return 1;
}

static int source_flag_value(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                             const struct tok *t, const struct mf_flag *f, struct mf_source *src)
{
    if (strcmp(f->name, "checksum") == 0) {
        if (!digest_ok(p, f->value, &src->digest))
            return flag_error(p, c, t, "write --checksum=sha256:<64 hex digits>",
                              "--checksum must be sha256: and 64 hex digits");
    } else if (strcmp(f->name, "name") == 0) {
        if (!adapter_name_ok(f->value))
            return flag_error(p, c, t, "use letters, digits, '_', '-' and '.', starting "
                                       "with a letter or '_' (at most 64)",
                              mf_modelfile_fmt(p, "invalid adapter name '%s'", f->value));
        src->name = f->value;
    } else if (strcmp(f->name, "scale") == 0) {
        if (mf_num_parse_f64(f->value, &src->scale) != 0)
            return flag_error(p, c, t, "write a finite number, e.g. --scale=0.5",
                              mf_modelfile_fmt(p, "invalid --scale '%s'", f->value));
        src->has_scale = 1;
    } else {
        src->merge = 1;
    }
    return 0;
}

/* Validates the flag tokens t[0..n) of a FROM/ADAPTER/DRAFT into fl. */
static int source_flag_list(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                            const struct tok *t, size_t n, struct mf_flag *fl,
                            struct mf_source *src)
{
    static const char *const adapter[] = {"checksum", "name", "scale", "merge"};
    int is_adapter = c->kind == MF_INSTR_ADAPTER;
    const char *usage = is_adapter ? "ADAPTER takes --name=N, --scale=F, --merge and "
                                     "--checksum=sha256:HEX"
                                   : mf_modelfile_fmt(p, "%s takes --checksum=sha256:HEX",
                                                      mf_modelfile_kind_name(c->kind));
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (split_flag(p, c, &t[i], &fl[i]) != 0 ||
            check_flag_shape(p, c, &t[i], &fl[i], adapter, is_adapter ? 4 : 1, usage) != 0) {
            rc = -1;
            continue;
        }
        for (size_t j = 0; j < i; j++)
            if (fl[j].name && strcmp(fl[j].name, fl[i].name) == 0)
                rc = flag_error(p, c, &t[i], NULL,
                                mf_modelfile_fmt(p, "flag --%s is given twice", fl[i].name));
        if (rc == 0 && source_flag_value(p, c, &t[i], &fl[i], src) != 0)
            rc = -1;
    }
    return rc;
}

int mf_modelfile_source_flags(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                              struct mf_instr *in, const char **ref_raw)
{
    struct tok *t;
    struct mf_flag *fl;
    size_t n = 0, lead = 0, trail, nf;

    in->u.src.scale = 1.0;
    *ref_raw = c->raw;
    if (c->quoted || !strstr(c->raw, "--"))
        return 0; /* no flags: the whole value is the reference */
    if (tokenize(p, c->raw, &t, &fl, &n) != 0)
        return -1;
    trail = n;
    while (lead < n && is_flag(c->raw, &t[lead]))
        lead++;
    while (trail > lead && is_flag(c->raw, &t[trail - 1]))
        trail--;
    nf = lead + (n - trail);
    if (nf == 0)
        return 0;
    *ref_raw = lead < trail ? mf_modelfile_strndup(p->arena, c->raw + t[lead].off,
                                                  t[trail - 1].off + t[trail - 1].len -
                                                      t[lead].off)
                            : "";
    memmove(t + lead, t + trail, (n - trail) * sizeof *t); /* flags only, in order */
    if (!*ref_raw || source_flag_list(p, c, t, nf, fl, &in->u.src) != 0)
        return -1;
    in->flags = fl;
    in->n_flags = nf;
    return 0;
}

int mf_modelfile_source_pin(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                            struct mf_instr *in, const char *ref)
{
    struct mf_source *src = &in->u.src;
    const char *at = strstr(ref, "@sha256:");
    const char *pin = NULL;
    int col = mf_modelfile_col_at(c, 0);
    while (at && strstr(at + 1, "@sha256:"))
        at = strstr(at + 1, "@sha256:");
    if (at && (!digest_ok(p, at + 1, &pin) || at == ref)) {
        mf_modelfile_diag(p, MF_DIAG_ERROR, c->val_line, col, (int)strlen(c->raw),
                          "write REF@sha256:<64 hex digits>",
                          "invalid digest pin '%s'", at + 1);
        return -1;
    }
    if (pin && src->digest && strcmp(pin, src->digest) != 0) {
        mf_modelfile_diag(p, MF_DIAG_ERROR, c->val_line, col, (int)strlen(c->raw),
                          "keep one of the two pins", "the @sha256 pin and --checksum differ");
        return -1;
    }
    if (pin) {
        src->digest = pin;
        ref = mf_modelfile_strndup(p->arena, ref, (size_t)(at - ref));
        if (!ref)
            return p->oom = 1, -1;
    }
    src->ref = ref;
    src->is_path = ref[0] == '/' || ref[0] == '.' || ref[0] == '~';
    return 0;
}

/* ------------------------------------------------------------------- RUN */

int mf_modelfile_duration_ms(const char *s, int64_t *ms)
{
    static const struct { const char *u; double ns; } units[] = {
        {"ns", 1}, {"us", 1e3}, {"\xc2\xb5s", 1e3}, {"\xce\xbcs", 1e3},
        {"ms", 1e6}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}};
    double total = 0;
    if (!*s)
        return -1;
    while (*s) {
        const char *d = s;
        double v = 0, scale = 1;
        int digits = 0, frac = 0;
        for (; (*d >= '0' && *d <= '9') || (*d == '.' && !frac); d++) {
            if (*d == '.') {
                frac = 1;
                continue;
            }
            digits++;
            if (frac)
                v += (*d - '0') * (scale /= 10);
            else
                v = v * 10 + (*d - '0');
        }
        size_t ul = 0;
        while (d[ul] && d[ul] != '.' && !(d[ul] >= '0' && d[ul] <= '9'))
            ul++;
        size_t k = 0;
        while (k < sizeof units / sizeof units[0] &&
               !(strlen(units[k].u) == ul && strncmp(units[k].u, d, ul) == 0))
            k++;
        if (!digits || k == sizeof units / sizeof units[0])
            return -1;
        total += v * units[k].ns;
        s = d + ul;
    }
    if (total > 9.2e18)
        return -1;
    *ms = (int64_t)(total / 1e6);
    return 0;
}

/* One key=value of --mount into m. */
static const char *mount_key(struct mf_modelfile_parser *p, struct mf_mount *m, const char *k,
                             size_t kl, const char *v, int *have_type)
{
    if (kl == 4 && strncmp(k, "type", 4) == 0) {
        if (v && strcmp(v, "cache") == 0)
            m->type = MF_MOUNT_CACHE;
        else if (v && strcmp(v, "secret") == 0)
            m->type = MF_MOUNT_SECRET;
        else
            return "type must be cache or secret";
        *have_type = 1;
    } else if ((kl == 6 && strncmp(k, "target", 6) == 0) || (kl == 3 && strncmp(k, "dst", 3) == 0) ||
               (kl == 11 && strncmp(k, "destination", 11) == 0)) {
        if (!v || v[0] != '/')
            return "target must be an absolute path";
        m->target = v;
    } else if (kl == 2 && strncmp(k, "id", 2) == 0) {
        if (!v || !v[0] || strspn(v, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789._-") != strlen(v))
            return "id must be letters, digits, '.', '_' or '-'";
        m->id = v;
    } else if (kl == 8 && strncmp(k, "required", 8) == 0) {
        if (v ? mf_num_parse_bool(v, &m->required) != 0 : (m->required = 1, 0))
            return "required must be true or false";
    } else {
        return mf_modelfile_fmt(p, "unknown mount option '%.*s' (type, target, id, required)",
                                (int)kl, k);
    }
    return NULL;
}

/* --mount=type=cache,target=P | type=secret,id=ID[,target=P][,required]. */
static const char *parse_mount(struct mf_modelfile_parser *p, const char *v, struct mf_mount *m)
{
    int have_type = 0;
    const char *why = NULL;
    memset(m, 0, sizeof *m);
    while (*v && !why) {
        size_t n = strcspn(v, ",");
        const char *eq = memchr(v, '=', n);
        size_t kl = eq ? (size_t)(eq - v) : n;
        const char *val = eq ? mf_modelfile_strndup(p->arena, eq + 1, n - kl - 1) : NULL;
        if (eq && !val)
            return p->oom = 1, "out of memory";
        why = mount_key(p, m, v, kl, val, &have_type);
        v += n + (v[n] == ',');
    }
    if (!why && !have_type)
        why = "type= is required (cache or secret)";
    if (!why && m->type == MF_MOUNT_CACHE && !m->target)
        why = "a cache mount needs target=PATH";
    if (!why && m->type == MF_MOUNT_SECRET && !m->id)
        why = "a secret mount needs id=ID";
    return why;
}

static int run_flag(struct mf_modelfile_parser *p, const struct mf_lexcmd *c, const struct tok *t,
                    const struct mf_flag *f, struct mf_run *run, struct mf_vec *mounts)
{
    if (strcmp(f->name, "network") == 0) {
        if (strcmp(f->value, "none") == 0)
            run->network = MF_NET_NONE;
        else if (strcmp(f->value, "host") == 0)
            run->network = MF_NET_HOST;
        else
            return flag_error(p, c, t, "write --network=none or --network=host",
                              mf_modelfile_fmt(p, "unknown network '%s'", f->value));
    } else if (strcmp(f->name, "user") == 0) {
        if (strcmp(f->value, "0") == 0 || strcmp(f->value, "root") == 0)
            run->root = 1;
        else if (strcmp(f->value, "1000") != 0 && strcmp(f->value, "mfc") != 0)
            return flag_error(p, c, t, "write --user=0 for root inside the sandbox (the "
                                       "default is the unprivileged user 1000)",
                              mf_modelfile_fmt(p, "unknown --user '%s'", f->value));
    } else if (strcmp(f->name, "timeout") == 0) {
        if (mf_modelfile_duration_ms(f->value, &run->timeout_ms) != 0 || run->timeout_ms <= 0)
            return flag_error(p, c, t, "write a positive duration such as 90s, 10m or 1h30m",
                              mf_modelfile_fmt(p, "invalid --timeout '%s'", f->value));
    } else {
        struct mf_mount m;
        const char *why = parse_mount(p, f->value, &m);
        if (why)
            return flag_error(p, c, t, "write --mount=type=cache,target=/path or "
                                       "--mount=type=secret,id=NAME",
                              mf_modelfile_fmt(p, "invalid --mount: %s", why));
        if (mf_modelfile_vec_push(mounts, &m) != 0)
            return p->oom = 1, -1;
    }
    return 0;
}

/* RUN ["prog", "arg"]: the exec form when the command is a JSON array of
 * strings; otherwise (not JSON) the shell form, as Docker does. */
static int run_command(struct mf_modelfile_parser *p, const struct mf_lexcmd *c, size_t off,
                       struct mf_run *run)
{
    const char *cmd = c->raw + off;
    struct mf_err e;
    json_t *j = cmd[0] == '[' ? mf_json_parse(cmd, strlen(cmd), "RUN", &e) : NULL;
    run->shell = cmd;
    if (!j)
        return 0;
    size_t n = json_is_array(j) ? json_array_size(j) : 0;
    const char **argv = mf_modelfile_alloc(p->arena, (n + 1) * sizeof *argv);
    int rc = argv ? 0 : (p->oom = 1, -1);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        json_t *s = json_array_get(j, i);
        argv[i] = json_is_string(s) ? mf_modelfile_strndup(p->arena, json_string_value(s),
                                                           json_string_length(s))
                                    : NULL;
        if (!argv[i] || strlen(argv[i]) != json_string_length(s))
            rc = -1;
    }
    json_decref(j);
    if (rc != 0 || n == 0) {
        mf_modelfile_diag(p, MF_DIAG_ERROR, c->val_line, mf_modelfile_col_at(c, off),
                          (int)strlen(cmd), "write RUN [\"program\", \"arg\", ...]",
                          "RUN's exec form must be a non-empty JSON array of strings");
        return -1;
    }
    run->shell = NULL;
    run->argv = argv;
    run->argc = n;
    return 0;
}

int mf_modelfile_run(struct mf_modelfile_parser *p, const struct mf_lexcmd *c,
                     struct mf_instr *in)
{
    static const char *const names[] = {"network", "mount", "timeout", "user"};
    static const char *usage = "RUN takes --network=none|host, --mount=type=cache,target=P, "
                               "--mount=type=secret,id=ID, --timeout=DURATION and --user=0";
    struct tok *t;
    struct mf_flag *fl;
    struct mf_vec mounts = {.elem = sizeof(struct mf_mount)};
    size_t n, nf = 0;
    int rc = 0, oom = 0;
    if (tokenize(p, c->raw, &t, &fl, &n) != 0)
        return -1;
    for (; nf < n && is_flag(c->raw, &t[nf]); nf++) {
        if (split_flag(p, c, &t[nf], &fl[nf]) != 0 ||
            check_flag_shape(p, c, &t[nf], &fl[nf], names, 4, usage) != 0 ||
            run_flag(p, c, &t[nf], &fl[nf], &in->u.run, &mounts) != 0)
            rc = -1;
    }
    if (nf == n) {
        mf_modelfile_diag(p, MF_DIAG_ERROR, c->line, c->col, c->kw_len,
                          "write RUN [FLAGS] COMMAND", "RUN needs a command");
        rc = -1;
    }
    in->u.run.mounts = mf_modelfile_vec_finish(&mounts, p->arena, &in->u.run.n_mounts, &oom);
    if (oom)
        return p->oom = 1, -1;
    in->flags = nf ? fl : NULL;
    in->n_flags = nf;
    return rc == 0 ? run_command(p, c, nf < n ? t[nf].off : 0, &in->u.run) : -1;
}

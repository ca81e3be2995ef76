/*
 * manifest.c: Kubernetes and Compose documents for an mfc image.
 *
 * Builds the documents as JSON from the image config (so tests can compare
 * them as data) and writes them as one YAML stream through libyaml's emitter
 * (the way plan_config.c writes model.yaml). What the documents say, and why:
 *
 * - the container is the image as built: its entrypoint (mfc-serve --config
 *   /etc/mfc/model.yaml) is not overridden; its Env, less PATH, is repeated
 *   so an operator sees and edits it in one place; MFC_PORT follows --port;
 * - /health answers 503 while the model loads, 200 when ready, 503 while
 *   draining (docs/api.md), so a startupProbe (up to 10 minutes) gates the
 *   liveness probe and the readiness probe takes a pod out on SIGTERM;
 * - terminationGracePeriodSeconds 45 outlasts MFC_DRAIN_TIMEOUT's 30 s;
 * - prometheus.io/{scrape,port,path} annotations point at /metrics, on the
 *   pod (kubernetes-pods discovery) and on the Service (endpoints discovery);
 * - GPUs are a limit on nvidia.com/gpu (the NVIDIA device plugin), and in
 *   Compose a device reservation with the nvidia driver, asked for only
 *   when the image's runtime is a CUDA build (label dev.mfc.runtime=cuda)
 *   or --gpus says so: a CPU image would hold a GPU it cannot use;
 * - CPU and memory requests follow the model's size (manifest_resources), so
 *   a scheduler places the pod where the weights fit;
 * - the image is named by digest (REF@sha256:...) when its reference names a
 *   registry, so every replica runs the bytes that were inspected.
 *
 * Owns nothing past one call; no I/O.
 */
#include "cli/manifest.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <yaml.h>

#include "common/buf.h"

#define MANIFEST_YAML_MAX (16u << 20) /* an image's Env is bounded by its 4 MiB-ish config */
#define MANIFEST_MAX_DEPTH 16         /* the documents are 9 deep */
#define MANIFEST_DEFAULT_PORT 8080
#define MANIFEST_GRACE_S 45 /* > MFC_DRAIN_TIMEOUT's default 30 s */
#define MANIFEST_LABEL "app.kubernetes.io/name"

/* ---- names and ports ---------------------------------------------------------------- */

int manifest_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > MANIFEST_NAME_MAX - 1 || s[0] == '-' || s[n - 1] == '-')
        return 0;
    return strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-") == n;
}

void manifest_name_from_ref(const char *ref, char out[MANIFEST_NAME_MAX])
{
    const char *b = strrchr(ref, '/');
    b = b ? b + 1 : ref;
    size_t n = strcspn(b, ":@"); /* the tag or digest goes */
    size_t o = 0;
    for (size_t i = 0; i < n && o < MANIFEST_NAME_MAX - 1; i++) {
        unsigned char c = (unsigned char)b[i];
        char x = isalnum(c) && c < 0x80 ? (char)tolower(c) : '-';
        if (x == '-' && (o == 0 || out[o - 1] == '-'))
            continue; /* no leading or doubled dashes */
        out[o++] = x;
    }
    while (o > 0 && out[o - 1] == '-')
        o--;
    out[o] = '\0';
    if (o == 0)
        snprintf(out, MANIFEST_NAME_MAX, "mfc");
}

/* 1..65535 from a whole decimal string, else 0. */
static int port_value(const char *s, size_t n)
{
    long v = 0;
    if (n == 0 || n > 5)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return 0;
        v = v * 10 + (s[i] - '0');
    }
    return v >= 1 && v <= 65535 ? (int)v : 0;
}

int manifest_image_port(const json_t *image_config)
{
    const json_t *cfg = json_object_get(image_config, "config");
    size_t i;
    json_t *e;
    json_array_foreach (json_object_get(cfg, "Env"), i, e) {
        const char *s = json_string_value(e);
        if (s && strncmp(s, "MFC_PORT=", 9) == 0 && port_value(s + 9, strlen(s + 9)))
            return port_value(s + 9, strlen(s + 9));
    }
    const char *k;
    json_t *x;
    json_object_foreach ((json_t *)json_object_get(cfg, "ExposedPorts"), k, x) {
        size_t n = strlen(k);
        if (n > 4 && strcmp(k + n - 4, "/tcp") == 0 && port_value(k, n - 4))
            return port_value(k, n - 4);
    }
    return MANIFEST_DEFAULT_PORT;
}

/* ---- the documents ------------------------------------------------------------------ */

/* The image's Env as [{"name", "value"}], PATH left out, MFC_PORT replaced by
 * (or, when absent, added as) port when set_port. NULL when memory ran out. */
static json_t *env_list(const json_t *image_config, int port, int set_port)
{
    json_t *env = json_array();
    char p[16];
    int have_port = 0;
    size_t i;
    json_t *e;
    snprintf(p, sizeof p, "%d", port);
    json_array_foreach (json_object_get(json_object_get(image_config, "config"), "Env"), i, e) {
        const char *s = json_string_value(e);
        const char *eq = s ? strchr(s, '=') : NULL;
        if (!eq || eq == s || (eq - s == 4 && strncmp(s, "PATH", 4) == 0))
            continue;
        char *name = strndup(s, (size_t)(eq - s));
        const char *value = eq + 1;
        if (name && strcmp(name, "MFC_PORT") == 0) {
            have_port = 1;
            if (set_port)
                value = p;
        }
        if (!name || json_array_append_new(env, json_pack("{s:s, s:s}", "name", name, "value",
                                                          value)) != 0) {
            free(name);
            json_decref(env);
            return NULL;
        }
        free(name);
    }
    if (set_port && !have_port &&
        json_array_append_new(env, json_pack("{s:s, s:s}", "name", "MFC_PORT", "value", p)) != 0) {
        json_decref(env);
        return NULL;
    }
    return env;
}

static json_t *prometheus_annotations(int port)
{
    char p[16];
    snprintf(p, sizeof p, "%d", port);
    return json_pack("{s:s, s:s, s:s}", "prometheus.io/scrape", "true", "prometheus.io/port", p,
                     "prometheus.io/path", "/metrics");
}

static json_t *probe(int period, int failures)
{
    return json_pack("{s:{s:s, s:s}, s:i, s:i, s:i}", "httpGet", "path", "/health", "port", "http",
                     "periodSeconds", period, "timeoutSeconds", 5, "failureThreshold", failures);
}

void manifest_resources(const json_t *image_config, const struct manifest_opts *o,
                        struct manifest_resources *r)
{
    const char *rt = json_string_value(
        json_object_get(json_object_get(json_object_get(image_config, "config"), "Labels"),
                        "dev.mfc.runtime"));
    const uint64_t mib = 1u << 20, step = 256;
    uint64_t need = o->model_bytes ? o->model_bytes + o->model_bytes / 4 + 512 * mib : 0;
    r->memory_mib = (need / mib + step - 1) / step * step;
    uint64_t c = o->model_bytes / (2048 * mib) + 1;
    r->cpus = o->model_bytes ? (int)(c > 8 ? 8 : c) : 0;
    r->gpus = o->gpus >= 0 ? o->gpus : rt && strcmp(rt, "cuda") == 0;
}

/* resources: requests (cpu, memory) and limits (memory, GPUs); NULL when
 * there is nothing to ask for. */
static json_t *k8s_resources(const struct manifest_resources *r)
{
    json_t *req = json_object(), *lim = json_object(), *res = json_object();
    char mem[32], cpu[16];
    snprintf(mem, sizeof mem, "%lluMi", (unsigned long long)r->memory_mib);
    snprintf(cpu, sizeof cpu, "%d", r->cpus);
    if (r->memory_mib) {
        json_object_set_new(req, "cpu", json_string(cpu));
        json_object_set_new(req, "memory", json_string(mem));
        json_object_set_new(lim, "memory", json_string(mem));
    }
    if (r->gpus > 0)
        json_object_set_new(lim, "nvidia.com/gpu", json_integer(r->gpus));
    if (json_object_size(req))
        json_object_set(res, "requests", req);
    if (json_object_size(lim))
        json_object_set(res, "limits", lim);
    json_decref(req);
    json_decref(lim);
    if (!json_object_size(res)) {
        json_decref(res);
        return NULL;
    }
    return res;
}

static json_t *k8s_deployment(const struct manifest_opts *o, const struct manifest_resources *rs,
                              int port, json_t *env)
{
    json_t *ann = prometheus_annotations(port);
    if (ann && o->digest && o->digest[0])
        json_object_set_new(ann, "dev.mfc.image.digest", json_string(o->digest));
    json_t *container = json_pack(
        "{s:s, s:s, s:s, s:[{s:s, s:i, s:s}], s:o, s:o, s:o, s:o}", "name", o->name, "image",
        o->image, "imagePullPolicy", "IfNotPresent", "ports", "name", "http", "containerPort",
        port, "protocol", "TCP", "env", env, "startupProbe", probe(5, 120), "readinessProbe",
        probe(5, 2), "livenessProbe", probe(10, 3));
    json_t *res = container ? k8s_resources(rs) : NULL;
    if (res)
        json_object_set_new(container, "resources", res);
    return json_pack("{s:s, s:s, s:{s:s, s:{s:s, s:s}}, s:{s:i, s:{s:{s:s}}, "
                     "s:{s:{s:{s:s}, s:o}, s:{s:i, s:[o]}}}}",
                     "apiVersion", "apps/v1", "kind", "Deployment", "metadata", "name", o->name,
                     "labels", MANIFEST_LABEL, o->name, "app.kubernetes.io/managed-by", "mfc",
                     "spec", "replicas", o->replicas, "selector", "matchLabels", MANIFEST_LABEL,
                     o->name, "template", "metadata", "labels", MANIFEST_LABEL, o->name,
                     "annotations", ann, "spec", "terminationGracePeriodSeconds",
                     MANIFEST_GRACE_S, "containers", container);
}

static json_t *k8s_service(const struct manifest_opts *o, int port)
{
    return json_pack("{s:s, s:s, s:{s:s, s:{s:s, s:s}, s:o}, s:{s:s, s:{s:s}, s:[{s:s, s:i, "
                     "s:s, s:s}]}}",
                     "apiVersion", "v1", "kind", "Service", "metadata", "name", o->name, "labels",
                     MANIFEST_LABEL, o->name, "app.kubernetes.io/managed-by", "mfc",
                     "annotations", prometheus_annotations(port), "spec", "type", "ClusterIP",
                     "selector", MANIFEST_LABEL, o->name, "ports", "name", "http", "port", port,
                     "targetPort", "http", "protocol", "TCP");
}

static json_t *compose_file(const struct manifest_opts *o, const struct manifest_resources *rs,
                            int port, const json_t *env)
{
    char ports[32];
    snprintf(ports, sizeof ports, "%d:%d", port, port);
    json_t *environment = json_object();
    size_t i;
    json_t *e;
    json_array_foreach (env, i, e)
        json_object_set(environment, json_string_value(json_object_get(e, "name")),
                        json_object_get(e, "value"));
    json_t *labels = prometheus_annotations(port);
    if (labels && o->digest && o->digest[0])
        json_object_set_new(labels, "dev.mfc.image.digest", json_string(o->digest));
    json_t *svc = json_pack("{s:s, s:[s], s:o, s:o, s:s, s:s}", "image", o->image, "ports", ports,
                            "environment", environment, "labels", labels, "stop_grace_period",
                            "45s", "restart", "unless-stopped");
    json_t *resv = json_object();
    char mem[32], cpu[16];
    if (rs->memory_mib) {
        snprintf(mem, sizeof mem, "%lluM", (unsigned long long)rs->memory_mib);
        snprintf(cpu, sizeof cpu, "%d", rs->cpus);
        json_object_set_new(resv, "memory", json_string(mem));
        json_object_set_new(resv, "cpus", json_string(cpu));
    }
    if (rs->gpus > 0)
        json_object_set_new(resv, "devices",
                            json_pack("[{s:s, s:i, s:[s]}]", "driver", "nvidia", "count",
                                      rs->gpus, "capabilities", "gpu"));
    if (svc && json_object_size(resv))
        json_object_set_new(svc, "deploy",
                            json_pack("{s:{s:O}}", "resources", "reservations", resv));
    json_decref(resv);
    json_t *services = json_object();
    if (svc && services)
        json_object_set_new(services, o->name, svc);
    else
        json_decref(svc);
    return json_pack("{s:o}", "services", services);
}

int manifest_docs(const json_t *image_config, const struct manifest_opts *o, json_t **docs,
                  struct mf_err *err)
{
    if (!o->name || !manifest_name_valid(o->name))
        return mf_err_set(err, MF_EINVAL,
                          "name \"%s\": a name is 1 to 63 of a-z, 0-9 and '-', starting and "
                          "ending with a letter or digit (Kubernetes' DNS-1123 label)",
                          o->name ? o->name : "");
    if (!o->image || !o->image[0])
        return mf_err_set(err, MF_EINVAL, "no image reference to deploy");
    if (o->port < 0 || o->port > 65535)
        return mf_err_set(err, MF_EINVAL, "port %d: expected 1 to 65535", o->port);
    if (o->gpus < -1 || o->gpus > 64)
        return mf_err_set(err, MF_EINVAL, "gpus %d: expected 0 to 64", o->gpus);
    struct manifest_resources rs;
    manifest_resources(image_config, o, &rs);
    if (o->replicas < 1 || o->replicas > 10000)
        return mf_err_set(err, MF_EINVAL, "replicas %d: expected 1 to 10000", o->replicas);
    int port = o->port ? o->port : manifest_image_port(image_config);
    json_t *env = env_list(image_config, port, o->port != 0);
    json_t *out = json_array();
    int rc = env && out ? 0 : -1;
    if (rc == 0 && o->kind == MANIFEST_KUBERNETES) {
        rc = json_array_append_new(out, k8s_deployment(o, &rs, port, json_incref(env)));
        if (rc == 0)
            rc = json_array_append_new(out, k8s_service(o, port));
    } else if (rc == 0) {
        rc = json_array_append_new(out, compose_file(o, &rs, port, env));
    }
    json_decref(env);
    if (rc != 0) {
        json_decref(out);
        return mf_err_set(err, MF_ENOMEM, "manifest: out of memory building the documents");
    }
    *docs = out;
    return 0;
}

/* ---- YAML --------------------------------------------------------------------------- */

static int write_out(void *data, unsigned char *buffer, size_t size)
{
    return mf_buf_append(data, buffer, size, NULL) == 0;
}

/* 1 when a plain s would read back as something other than this string: empty,
 * YAML 1.1 booleans and nulls, and anything that starts like a number
 * (8080, 1e3, 8080:8080 is base 60 in YAML 1.1, .inf). Over-quoting is harmless. */
static int needs_quotes(const char *s)
{
    static const char *const words[] = {"true", "false", "yes", "no", "on", "off", "y", "n",
                                        "null", "~"};
    if (!s[0] || isdigit((unsigned char)s[0]) || s[0] == '.' ||
        ((s[0] == '-' || s[0] == '+') && (isdigit((unsigned char)s[1]) || s[1] == '.')))
        return 1;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcasecmp(s, words[i]) == 0)
            return 1;
    return 0;
}

static int emit(yaml_emitter_t *e, yaml_event_t *ev, int ok)
{
    return ok && yaml_emitter_emit(e, ev) ? 0 : -1;
}

static int scalar(yaml_emitter_t *e, const char *s, int is_string)
{
    yaml_event_t ev;
    yaml_scalar_style_t style = YAML_ANY_SCALAR_STYLE;
    if (is_string && strchr(s, '\n'))
        style = YAML_LITERAL_SCALAR_STYLE;
    else if (is_string && needs_quotes(s))
        style = YAML_DOUBLE_QUOTED_SCALAR_STYLE;
    return emit(e, &ev,
                yaml_scalar_event_initialize(&ev, NULL, NULL, (yaml_char_t *)s, (int)strlen(s),
                                             1, 1, style));
}

static int emit_value(yaml_emitter_t *e, const json_t *v, int depth)
{
    yaml_event_t ev;
    char num[48];
    const char *k;
    json_t *x;
    size_t i;
    if (depth > MANIFEST_MAX_DEPTH)
        return -2;
    switch (json_typeof(v)) {
    case JSON_OBJECT:
        if (emit(e, &ev, yaml_mapping_start_event_initialize(&ev, NULL, NULL, 1,
                                                             YAML_BLOCK_MAPPING_STYLE)))
            return -1;
        json_object_foreach ((json_t *)v, k, x) {
            int rc = scalar(e, k, 1);
            if (rc == 0)
                rc = emit_value(e, x, depth + 1);
            if (rc)
                return rc;
        }
        return emit(e, &ev, yaml_mapping_end_event_initialize(&ev));
    case JSON_ARRAY:
        if (emit(e, &ev, yaml_sequence_start_event_initialize(&ev, NULL, NULL, 1,
                                                              YAML_BLOCK_SEQUENCE_STYLE)))
            return -1;
        json_array_foreach (v, i, x) {
            int rc = emit_value(e, x, depth + 1);
            if (rc)
                return rc;
        }
        return emit(e, &ev, yaml_sequence_end_event_initialize(&ev));
    case JSON_STRING:
        return scalar(e, json_string_value(v), 1);
    case JSON_INTEGER:
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return scalar(e, num, 0);
    case JSON_REAL:
        snprintf(num, sizeof num, "%.17g", json_real_value(v));
        return scalar(e, num, 0);
    case JSON_TRUE:
        return scalar(e, "true", 0);
    case JSON_FALSE:
        return scalar(e, "false", 0);
    default:
        return scalar(e, "null", 0);
    }
}

static int emit_stream(yaml_emitter_t *e, const json_t *docs)
{
    yaml_event_t ev;
    size_t i;
    json_t *d;
    if (emit(e, &ev, yaml_stream_start_event_initialize(&ev, YAML_UTF8_ENCODING)))
        return -1;
    json_array_foreach (docs, i, d) {
        /* an explicit "---" before every document but the first */
        if (emit(e, &ev, yaml_document_start_event_initialize(&ev, NULL, NULL, NULL, i == 0)))
            return -1;
        int rc = emit_value(e, d, 0);
        if (rc)
            return rc;
        if (emit(e, &ev, yaml_document_end_event_initialize(&ev, 1)))
            return -1;
    }
    return emit(e, &ev, yaml_stream_end_event_initialize(&ev));
}

int manifest_yaml(const json_t *docs, char **out, size_t *len, struct mf_err *err)
{
    yaml_emitter_t e;
    struct mf_buf b;
    mf_buf_init(&b, MANIFEST_YAML_MAX);
    if (!yaml_emitter_initialize(&e))
        return mf_err_set(err, MF_ENOMEM, "manifest: cannot start the YAML emitter");
    yaml_emitter_set_output(&e, write_out, &b);
    yaml_emitter_set_unicode(&e, 1);
    yaml_emitter_set_width(&e, -1); /* no folding: equal inputs give equal bytes */
    int rc = emit_stream(&e, docs);
    if (rc == 0 && !yaml_emitter_flush(&e))
        rc = -1;
    if (rc == -2)
        rc = mf_err_set(err, MF_EINVAL, "manifest: documents nested deeper than %d levels",
                        MANIFEST_MAX_DEPTH);
    else if (rc)
        rc = mf_err_set(err, MF_ENOMEM, "manifest: cannot write YAML: %s",
                        e.problem ? e.problem : "output too large");
    yaml_emitter_delete(&e);
    if (rc == 0 && b.data) { /* mf_buf keeps a NUL after len */
        *out = b.data;
        *len = b.len;
        return 0;
    }
    mf_buf_free(&b);
    return rc ? rc : mf_err_set(err, MF_ENOMEM, "manifest: empty YAML output");
}

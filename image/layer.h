/*
 * layer.h: deterministic image layers (tar, optionally gzip) written straight
 * into the content store.
 *
 * A layer is described as a list of entries (a host file or bytes in memory,
 * the path it gets inside the image, its mode). layer_write sorts them, adds
 * the parent directories, and streams one tar through the store's blob
 * writer: each byte is read once, hashed once (twice for gzip: the tar for
 * the diff_id, the compressed blob for the digest), never held whole in
 * memory. Equal inputs give byte-identical layers, hence equal digests:
 *
 *   - format: POSIX pax (restricted: an extended header only where ustar
 *     cannot say it, e.g. sizes >= 8 GiB or long names; libarchive names it
 *     "PaxHeader/<name>" with no pid); no atime/ctime, no xattrs, no ACLs;
 *   - mtime: the caller's (SOURCE_DATE_EPOCH, else 0; layer_source_date);
 *   - uid/gid 0, uname/gname empty, modes 0644 / 0755 / dirs 0755;
 *   - tar blocking: none beyond 512-byte records (the two zero records end it);
 *   - gzip through zlib with a fixed header (mtime 0, no name, OS 3 "Unix");
 *     zstd through libzstd at LAYER_ZSTD_LEVEL, one thread, with a checksum.
 *
 * The weights' payload is not padded to a 4 KiB offset inside the layer: the
 * runtime mmaps the unpacked file that the container engine writes, not the
 * blob, so alignment inside the tar would buy nothing today (docs/image.md).
 *
 * The layer module owns nothing beyond one call and no globals; the runtime
 * layer is cached through the store's build-cache records (layer_runtime.c).
 */
#ifndef MFC_LAYER_H
#define MFC_LAYER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "store/store.h"

#define LAYER_MT_TAR "application/vnd.oci.image.layer.v1.tar"
#define LAYER_MT_TAR_GZIP "application/vnd.oci.image.layer.v1.tar+gzip"
#define LAYER_MT_TAR_ZSTD "application/vnd.oci.image.layer.v1.tar+zstd"
/* zstd level of compressed layers: level 3 (zstd's default) gives the
 * runtime layer 4% smaller than gzip -6 in a twentieth of the time
 * (docs/image.md, "Compression") */
#define LAYER_ZSTD_LEVEL 3
#define LAYER_PATH_MAX 1024   /* bytes of a path inside a layer, plus NUL */
#define LAYER_MAX_ENTRIES 4096 /* entries of one layer (the runtime closure is ~10) */

/* One file of a layer. Exactly one of src or data is used: src when not NULL. */
struct layer_entry {
    const char *path;  /* borrowed: path inside the image, e.g. "models/m.gguf" (no
                          leading "/", no "..", no empty components) */
    const char *src;   /* borrowed: host file to copy, or NULL */
    const void *data;  /* borrowed: content when src is NULL */
    size_t len;        /* bytes of data */
    unsigned mode;     /* 0644 or 0755 (other bits are refused) */
};

enum layer_compression {
    LAYER_NONE = 0, /* plain tar: digest == diff_id (weights, adapters) */
    LAYER_GZIP = 1, /* tar+gzip (config; the runtime with MFC_RUNTIME_COMPRESSION=gzip) */
    LAYER_ZSTD = 2, /* tar+zstd (the runtime) */
};

/* Reports tar bytes written so far out of the entries' total size. */
typedef void (*layer_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* What a written layer is: the manifest descriptor plus the config's diff_id. */
struct layer_result {
    struct store_desc desc;           /* media type, blob digest, blob size */
    char diff_id[STORE_DIGEST_BUF];   /* sha256 of the uncompressed tar */
    char filepath[LAYER_PATH_MAX];    /* "/models/m.gguf" for a one-file layer, else "" */
    int cuda;                         /* the runtime layer: it carries libcudart (a CUDA build) */
};

/* Writing layers. */

/* SOURCE_DATE_EPOCH when set to a valid non-negative integer, else 0.
 * MF_EINVAL when it is set to something else (a reproducible build must not
 * silently fall back). */
int layer_source_date(int64_t *mtime, struct mf_err *err);

/* Writes a layer of n entries into the store (nothing is stored on failure;
 * *out untouched). Entries may come in any order; duplicates are MF_EINVAL.
 * Each file's size is taken when it is opened and must not change while
 * copying (MF_EIO names it). For a one-entry layer out->filepath is "/" + path. */
int layer_write(struct store *s, const struct layer_entry *e, size_t n,
                enum layer_compression comp, int64_t mtime, struct layer_result *out,
                struct mf_err *err);
/* layer_write reporting its progress to fn (NULL: none) every few MiB and
 * once at the end with done == total. */
int layer_write_progress(struct store *s, const struct layer_entry *e, size_t n,
                         enum layer_compression comp, int64_t mtime, layer_progress_fn fn,
                         void *arg, struct layer_result *out, struct mf_err *err);

/* The runtime layer: binary at usr/bin/<name> (0755) plus, for a dynamic
 * executable, its shared-library closure and ELF interpreter at the paths the
 * host resolves them to (file contents, not symlinks), so the image needs
 * nothing else. The closure comes from running `ldd` (glibc's loader in trace
 * mode, which maps but does not run the program): it honours RUNPATH,
 * ld.so.conf and $ORIGIN exactly as the runtime will, which a hand-written
 * DT_NEEDED walker would have to re-implement. A CUDA build also gets the
 * cuBLAS beside its libcudart and that cuBLAS's own closure
 * (layer_cublas_path), none of which ldd lists for the binary. Only use it on
 * a binary we built (the runtime), never on untrusted input.
 *
 * Cached: the key (layer_runtime_key) is the digest of every input — each
 * file's path in the layer, mode and content digest (through the store's stat
 * cache), the name, mtime, compression and compressor version — and a build
 * whose key has a record in the store's build cache and whose blob is present
 * reuses that layer without reading a file (*cached = 1). Otherwise the layer
 * is written (fn gets its progress) and recorded. cached may be NULL. */
int layer_write_runtime(struct store *s, const char *binary, const char *name, int64_t mtime,
                        enum layer_compression comp, layer_progress_fn fn, void *arg,
                        struct layer_result *out, int *cached, struct mf_err *err);
/* The runtime layer's cache key (as layer_write_runtime computes it) without
 * writing anything: for the image step's own cache key, so that a changed
 * library re-runs the image step even when the binary is the same. */
int layer_runtime_digest(struct store *s, const char *binary, const char *name, int64_t mtime,
                         enum layer_compression comp, char key[STORE_DIGEST_BUF],
                         struct mf_err *err);
/* The compression of the runtime layer: zstd, or what MFC_RUNTIME_COMPRESSION
 * says ("gzip" for Docker before 23.0, "zstd"); MF_EINVAL for anything else. */
int layer_runtime_compression(enum layer_compression *comp, struct mf_err *err);

/* Streams the deterministic tar of n entries (same rules as layer_write) to
 * fn, which gets the bytes in order and returns 0 or an MF_E* code; the first
 * failure stops the stream and is returned. For image archives (oci.c). */
typedef int (*layer_out_fn)(void *arg, const void *p, size_t n, struct mf_err *err);
int layer_tar_stream(const struct layer_entry *e, size_t n, int64_t mtime, layer_out_fn fn,
                     void *arg, struct mf_err *err);
/* The same tar written to the file fd at its offset (not O_APPEND), byte for
 * byte but for one thing: a src file of 64 MiB or more starts its content on
 * a 512 KiB boundary of fd (a pax header before it carries a "comment" record
 * as padding; layer_pax.c says why). Each src file's content goes from its
 * file to fd in the kernel (copy_file_range(2); sendfile(2) or read+write
 * where the two files do not support it), so a multi-GB weight blob is never
 * copied through user space; headers and padding come from libarchive in
 * between. MF_EIO names a file
 * that cannot be read or shrank, or a failed write; fd's content is then
 * undefined (write it to a temporary). For image archives (oci.c). */
int layer_tar_write_fd(const struct layer_entry *e, size_t n, int64_t mtime, int fd,
                       struct mf_err *err);
/* Copies n bytes from in to out, both at and advancing their file offsets,
 * the way layer_tar_write_fd copies a file's content (in the kernel where
 * possible). MF_EIO, naming what, when in ends early or a read or write fails. */
int layer_copy_fd(int in, int out, uint64_t n, const char *what, struct mf_err *err);

/* Internals for tests. */

/* The headers of a tar entry for a regular file at archive offset pos (a
 * multiple of 512) such that its content starts at a multiple of align (a
 * multiple of 512, 1 KiB to 512 KiB): a pax 'x' header whose "comment"
 * record pads, then the ustar header. Appended to out. layer_pax.c. */
struct mf_buf;
int layer_pax_aligned_header(const char *path, unsigned mode, uint64_t size, int64_t mtime,
                             uint64_t pos, uint64_t align, struct mf_buf *out,
                             struct mf_err *err);

/* Checks a path inside a layer (see struct layer_entry). 0 or MF_EINVAL. */
int layer_path_check(const char *path, struct mf_err *err);
/* The runtime layer's cache key for n entries (the files layer_write_runtime
 * would tar; their digests through s's stat cache). layer_runtime.c. */
int layer_runtime_key(struct store *s, const struct layer_entry *e, size_t n, int64_t mtime,
                      enum layer_compression comp, char key[STORE_DIGEST_BUF],
                      struct mf_err *err);
/* Parses `ldd` output into absolute paths (malloc'd strings in a malloc'd
 * array; free each and the array). "not found" lines are MF_ENOTFOUND. */
int layer_parse_ldd(const char *text, char ***paths, size_t *n, struct mf_err *err);
/* The cuBLAS that goes with an ldd list (n absolute paths): when one of them
 * is named libcudart.so*, the first of libcublas.so.13, libcublas.so.12 and
 * libcublas.so in its directory that is a regular file (symlinks followed).
 * Why: mfc-serve loads cuBLAS with dlopen (kernels/gemm.cu, open_cublas, which
 * tries those names beside libcudart last), so ldd never lists it, and an
 * image without it loses the tensor-core GEMM and LoRA on the GPU. Returns 0
 * with *path the malloc'd path (caller frees), 0 with *path NULL when the list
 * has no libcudart or no cuBLAS lies beside it, or MF_ENOMEM (*path NULL). */
int layer_cublas_path(char *const *libs, size_t n, char **path, struct mf_err *err);

#endif

/*
 * model_int.h: internals shared by the loader's files (model.c binds the
 * tensors, model_hparams.c reads the keys, model_rope.c makes RoPE tables).
 */
#ifndef MFC_MODEL_INT_H
#define MFC_MODEL_INT_H

#include "runtime/model/model.h"

struct gguf_file;

/* Reads every hyper-parameter of m->hp from gf under its family's prefix.
 * 0, or MF_EFORMAT / MF_EUNSUPPORTED naming the file and key. */
int model_read_hparams(const struct gguf_file *gf, struct model *m, struct mf_err *err);

/* After the layers exist: which layers slide and the RoPE base, scale and
 * YaRN range of each rope kind. 0 or an error naming the key. */
int model_read_layer_kinds(const struct gguf_file *gf, struct model *m, struct mf_err *err);

#endif

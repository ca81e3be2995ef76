/*
 * run_chat.h: a conversation with mfc-serve for `mfc run` (run_chat.c):
 * one prompt answered, or an interactive loop like `ollama run`.
 */
#ifndef MFC_RUN_CHAT_H
#define MFC_RUN_CHAT_H

#include <stdio.h>

#include <jansson.h>

#include "cli/run.h"

struct run_chat {
    const struct run_client *cl; /* borrowed */
    const char *model;           /* borrowed: the request's "model" */
    FILE *in, *out, *diag;       /* borrowed: input, replies, errors and stats */
    json_t *messages;            /* owned: the history (user and assistant turns) */
    json_t *options;             /* owned: /set parameter values */
    char *system;                /* owned: /set system, or NULL */
    volatile int *cancel;        /* borrowed: set by SIGINT; may be NULL */
    int verbose;                 /* nonzero: token counts and rate after each reply */
    int emitted_nl;              /* the last streamed byte was a newline */
};

/* Sets up an empty conversation. */
int run_chat_init(struct run_chat *ch, const struct run_client *cl, const char *model, FILE *in,
                  FILE *out, FILE *diag, struct mf_err *err);
void run_chat_free(struct run_chat *ch);
/* Answers one prompt, streaming to ch->out and ending with a newline. */
int run_chat_once(struct run_chat *ch, const char *prompt, struct mf_err *err);
/* The interactive loop until /bye or EOF. A turn the server refuses is
 * reported on ch->diag and the loop goes on; a server that went away ends
 * it with its error. */
int run_chat_loop(struct run_chat *ch, struct mf_err *err);

#endif

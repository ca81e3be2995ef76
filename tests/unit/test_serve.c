/*
 * test_serve.c: mfc-serve's settings (runtime/serve_config.c: model.yaml as
 * plan_config.c writes it, MFC_* variables, flags and their precedence) and
 * request parsing (runtime/serve_req.c: the OpenAI and Ollama bodies, and
 * the 400 messages that name the offending field).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <unistd.h>

#include "runtime/serve.h"

int main(void)
{
    return 0;
}

/* The one table of every BRAID_* environment variable (name, default, type, doc).
 * Values are read from the environment at each call, so a communicator created after
 * setenv() sees the new value; `braid-info --params` prints the table and the README's
 * table is checked against it by a test. */
#ifndef BRAID_CORE_CONFIG_H
#define BRAID_CORE_CONFIG_H

#include "braid/braid.h"

#include <stdint.h>

typedef enum {
    BRAID_PARAM_INT,
    BRAID_PARAM_SIZE,
    BRAID_PARAM_STR,
    BRAID_PARAM_DOUBLE
} braid_param_type_t;

typedef struct {
    const char *name;   /* without the BRAID_ prefix */
    const char *defval; /* default as text ("" for none) */
    braid_param_type_t type;
    const char *doc;
} braid_param_t;

/* The table, terminated by an entry with name == NULL. */
const braid_param_t *braid_param_table(void);

/* Reads BRAID_<name>; on a malformed value sets the last error naming the variable and
 * returns BRAID_ERR_INVALID_ARG. SIZE accepts suffixes K, M, G (powers of 1024). */
braid_result_t braid_param_int(const char *name, int64_t *val_p);
braid_result_t braid_param_double(const char *name, double *val_p);
/* The value or the default; never NULL. */
const char *braid_param_str(const char *name);

#endif

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
/* 1 when BRAID_<name> (or its default) is "auto", any case: the caller picks the value. */
int braid_param_is_auto(const char *name);
/* BRAID_<name> as 0, 1 or auto (any case): *val_p = 0, 1 or 2; anything else sets the last
 * error naming the variable and returns BRAID_ERR_INVALID_ARG. */
braid_result_t braid_param_switch(const char *name, int *val_p);
braid_result_t braid_param_double(const char *name, double *val_p);
/* The value or the default; never NULL. */
const char *braid_param_str(const char *name);

/* 1 if the current value of p (set or default) is valid; else 0 and 'why' says what is wrong
 * (parse error, range, or not one of the choices, with a "did you mean"). */
int braid_param_valid(const braid_param_t *p, char *why, size_t len);
/* The closest of a comma list of words to 'word' (edit distance, case and '_' ignored) when
 * it is close enough to be a likely typo; NULL otherwise. Writes it into buf. */
const char *braid_did_you_mean(const char *word, const char *words, char *buf, size_t len);
/* Reports, through 'emit', every BRAID_* variable of the environment that is not in the table
 * (kind BRAID_LINT_UNKNOWN; level 1 = warn when a known name is close, with a "did you mean",
 * else 2 = info) and every set value that is invalid (BRAID_LINT_INVALID, level 1).
 * Variables of the layers and tools on top (BRAID_TEST_*, BRAID_DDP_*, ...) are skipped. */
enum { BRAID_LINT_UNKNOWN = 0, BRAID_LINT_INVALID = 1 };
void braid_config_lint(void (*emit)(int level, int kind, const char *msg));
/* Validates the transport settings (BRAID_SOCKET_IFNAME matches an interface with an
 * address, BRAID_NSOCKS_PERPEER in range) at init, whichever transport will run, so a
 * configuration that works on one host does not fail only once a second host joins. */
braid_result_t braid_config_check_transport(void);

#endif

/* Tuning files: the cost model's measured constants (written by `braid-info --tune --measure`
 * under a launcher, read at init from BRAID_TUNING_FILE by rank 0 and spread to every rank by
 * a bootstrap allgather, so every rank's model is the same).
 *
 * Format: one `key value` pair per line, '#' starts a comment, blank lines ignored. Keys (every
 * value a finite number > 0 unless noted):
 *   shm_alpha_us  shm_gbps      one message within a host: latency (us), bandwidth (GB/s)
 *   net_alpha_us  net_gbps      one message between hosts
 *   copy_gbps                   a local memcpy
 *   launch_us                   fixed cost of one (sub-)collective (>= 0)
 *   oversub_us                  extra latency per ring step per rank beyond the cores (>= 0)
 * A key may be left out (it keeps its built-in default); an unknown key, a malformed line or a
 * value out of range is an error naming the file, line and key. */
#include "algos/algo.h"
#include "core/log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *key;
    size_t off;
    int zero_ok;
} tune_key_t;

#define MODEL_FIELD(f) offsetof(braid_model_t, f)
static const tune_key_t keys[] = {
    {"shm_alpha_us", MODEL_FIELD(intra.alpha_us), 0}, {"shm_gbps", MODEL_FIELD(intra.gbps), 0},
    {"net_alpha_us", MODEL_FIELD(inter.alpha_us), 0}, {"net_gbps", MODEL_FIELD(inter.gbps), 0},
    {"copy_gbps", MODEL_FIELD(copy.gbps), 0},         {"launch_us", MODEL_FIELD(launch_us), 1},
    {"oversub_us", MODEL_FIELD(oversub_us), 1},
};
#define NKEYS (sizeof(keys) / sizeof(keys[0]))

braid_result_t braid_tuning_read(const char *path, braid_model_t *m)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return braid_set_error(BRAID_ERR_INVALID_ARG, "BRAID_TUNING_FILE: cannot open '%s': %m",
                               path);
    braid_model_t t = *m;
    char line[256];
    int lineno = 0;
    braid_result_t res = BRAID_SUCCESS;
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char key[64], extra[8];
        double v = 0;
        int k = sscanf(line, " %63s %lf %7s", key, &v, extra);
        if (k <= 0) continue; /* blank or comment */
        const tune_key_t *e = NULL;
        for (size_t i = 0; i < NKEYS; i++)
            if (k >= 1 && !strcmp(key, keys[i].key)) e = &keys[i];
        if (!e) {
            res = braid_set_error(BRAID_ERR_INVALID_ARG,
                                  "BRAID_TUNING_FILE %s:%d: unknown key '%s' (known: shm_alpha_us, "
                                  "shm_gbps, net_alpha_us, net_gbps, copy_gbps, launch_us, "
                                  "oversub_us)",
                                  path, lineno, key);
            break;
        }
        if (k != 2 || !isfinite(v) || v < 0 || (v == 0 && !e->zero_ok) || v > 1e9) {
            res = braid_set_error(BRAID_ERR_INVALID_ARG,
                                  "BRAID_TUNING_FILE %s:%d: %s needs one number %s", path, lineno,
                                  key, e->zero_ok ? ">= 0" : "> 0");
            break;
        }
        *(double *)((char *)&t + e->off) = v;
    }
    fclose(f);
    if (res == BRAID_SUCCESS) *m = t;
    return res;
}

void braid_tuning_write(FILE *f, const braid_model_t *m, const char *comment)
{
    if (comment && *comment) fprintf(f, "# %s\n", comment);
    for (size_t i = 0; i < NKEYS; i++)
        fprintf(f, "%s %.6g\n", keys[i].key, *(const double *)((const char *)m + keys[i].off));
}

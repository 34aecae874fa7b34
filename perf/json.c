/* A small streaming JSON writer for the perf tools' -J output (the layout of nccl-tests'
 * JSON file, version 3: config, devices, results, out_of_bounds, average_bus_bandwidth,
 * errors). Keys and values are escaped; non-finite doubles are written as null (JSON has no
 * NaN or infinity). */
#include "common.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

FILE *perf_json_open(const char *path, char *used, size_t len)
{
    /* As nccl-tests: never overwrite; "out.json" exists -> "out.json.0", "out.json.1", ... */
    snprintf(used, len, "%s", path);
    for (int i = 0; i < 1000; i++) {
        FILE *f = fopen(used, "wx");
        if (f || errno != EEXIST) return f;
        snprintf(used, len, "%s.%d", path, i);
    }
    errno = EEXIST;
    return NULL;
}

static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* Separator and key before a value; key is NULL inside lists. */
static void prefix(perf_json_t *j, const char *key)
{
    if (j->depth > 0) {
        if (j->count[j->depth - 1]++) fputc(',', j->f);
    }
    if (key) {
        put_string(j->f, key);
        fputc(':', j->f);
    }
}

static void open_(perf_json_t *j, const char *key, char c)
{
    if (!j->f) return;
    prefix(j, key);
    fputc(c, j->f);
    if (j->depth >= PERF_JSON_MAX_DEPTH) return; /* the writer nests 4 deep at most */
    j->count[j->depth] = 0;
    j->closer[j->depth] = c == '{' ? '}' : ']';
    j->depth++;
}

static void close_(perf_json_t *j)
{
    if (!j->f || j->depth == 0) return;
    j->depth--;
    fputc(j->closer[j->depth], j->f);
    if (j->depth == 0) fputc('\n', j->f);
}

void perf_json_obj(perf_json_t *j, const char *key)
{
    open_(j, key, '{');
}

void perf_json_obj_end(perf_json_t *j)
{
    close_(j);
}

void perf_json_list(perf_json_t *j, const char *key)
{
    open_(j, key, '[');
}

void perf_json_list_end(perf_json_t *j)
{
    close_(j);
}

void perf_json_str(perf_json_t *j, const char *key, const char *s)
{
    if (!j->f) return;
    prefix(j, key);
    put_string(j->f, s);
}

void perf_json_int(perf_json_t *j, const char *key, long long v)
{
    if (!j->f) return;
    prefix(j, key);
    fprintf(j->f, "%lld", v);
}

void perf_json_double(perf_json_t *j, const char *key, double v)
{
    if (!j->f) return;
    prefix(j, key);
    if (isfinite(v))
        fprintf(j->f, "%.17g", v);
    else
        fputs("null", j->f);
}

void perf_json_bool(perf_json_t *j, const char *key, int v)
{
    if (!j->f) return;
    prefix(j, key);
    fputs(v ? "true" : "false", j->f);
}

void perf_json_null(perf_json_t *j, const char *key)
{
    if (!j->f) return;
    prefix(j, key);
    fputs("null", j->f);
}

void perf_json_close(perf_json_t *j)
{
    if (!j->f) return;
    while (j->depth > 0)
        close_(j);
    fclose(j->f);
    j->f = NULL;
}

/* The README's table of BRAID_* variables must match the library's parameter table, and
 * malformed values must be rejected with a message naming the variable. */
#include "core/config.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(config, .timeout = 30);

Test(config, readme_table_matches_parameter_table)
{
    FILE *f = fopen(BRAID_SOURCE_DIR "/README.md", "r");
    cr_assert(f, "cannot open README.md");
    char line[512];
    int rows = 0;
    const braid_param_t *t = braid_param_table();
    while (fgets(line, sizeof(line), f)) {
        char name[64], def[64], doc[400];
        /* | BRAID_X | default | doc | */
        if (strncmp(line, "| BRAID_", 8)) continue;
        char *p = line + 2, *q = strchr(p, '|');
        cr_assert(q);
        snprintf(name, sizeof(name), "%.*s", (int)(q - p - 1), p);
        p = q + 2;
        q = strchr(p, '|');
        snprintf(def, sizeof(def), "%.*s", (int)(q - p > 0 ? q - p - 1 : 0), p);
        p = q + 2;
        q = strrchr(p, '|');
        snprintf(doc, sizeof(doc), "%.*s", (int)(q - p - 1), p);
        const braid_param_t *e = NULL;
        for (const braid_param_t *x = t; x->name; x++)
            if (!strcmp(name + 6, x->name)) e = x;
        cr_assert(e, "README documents %s, which the library does not know", name);
        cr_assert_str_eq(def, e->defval, "%s: README default '%s' vs '%s'", name, def, e->defval);
        cr_assert_str_eq(doc, e->doc, "%s: README text differs from the table", name);
        rows++;
    }
    fclose(f);
    int n = 0;
    for (const braid_param_t *x = t; x->name; x++)
        n++;
    cr_assert_eq(rows, n, "README lists %d variables, the library %d", rows, n);
}

Test(config, malformed_values_name_the_variable)
{
    int64_t v;
    setenv("BRAID_NSLOTS", "8x", 1);
    cr_assert_eq(braid_param_int("NSLOTS", &v), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "BRAID_NSLOTS='8x'"), "%s", braid_last_error());
    setenv("BRAID_CHUNK_SIZE", "256K", 1);
    cr_assert_eq(braid_param_int("CHUNK_SIZE", &v), BRAID_SUCCESS);
    cr_assert_eq(v, 256 << 10);
    setenv("BRAID_CHUNK_SIZE", "2M", 1);
    cr_assert_eq(braid_param_int("CHUNK_SIZE", &v), BRAID_SUCCESS);
    cr_assert_eq(v, 2 << 20);
    double d;
    setenv("BRAID_TIMEOUT", "-3", 1);
    cr_assert_eq(braid_param_double("TIMEOUT", &d), BRAID_ERR_INVALID_ARG);
    setenv("BRAID_TIMEOUT", "2.5", 1);
    cr_assert_eq(braid_param_double("TIMEOUT", &d), BRAID_SUCCESS);
    cr_assert_float_eq(d, 2.5, 1e-12);
}

/* A size whose default is auto takes auto (any case) or a size; nothing else, and auto is no
 * size where the default is a number. */
Test(config, auto_sizes_where_the_default_is_auto)
{
    const braid_param_t *blk = NULL, *chunk = NULL;
    for (const braid_param_t *p = braid_param_table(); p->name; p++) {
        if (!strcmp(p->name, "DIRECT_BLOCK")) blk = p;
        if (!strcmp(p->name, "CHUNK_SIZE")) chunk = p;
    }
    cr_assert(blk && chunk);
    cr_assert_str_eq(blk->defval, "auto");
    char why[128];
    const char *good[] = {"auto", "AUTO", "1M", "4096", "0"}, *bad[] = {"autox", "1Q", "-1"};
    for (size_t i = 0; i < 5; i++) {
        setenv("BRAID_DIRECT_BLOCK", good[i], 1);
        cr_assert(braid_param_valid(blk, why, sizeof(why)), "%s: %s", good[i], why);
        cr_assert_eq(braid_param_is_auto("DIRECT_BLOCK"), i < 2, "%s", good[i]);
    }
    for (size_t i = 0; i < 3; i++) {
        setenv("BRAID_DIRECT_BLOCK", bad[i], 1);
        cr_assert(!braid_param_valid(blk, why, sizeof(why)), "%s taken", bad[i]);
    }
    unsetenv("BRAID_DIRECT_BLOCK");
    cr_assert(braid_param_is_auto("DIRECT_BLOCK"), "the default");
    setenv("BRAID_CHUNK_SIZE", "auto", 1);
    cr_assert(!braid_param_valid(chunk, why, sizeof(why)), "CHUNK_SIZE=auto taken");
    unsetenv("BRAID_CHUNK_SIZE");
}

Test(config, switches_take_0_1_and_auto_only)
{
    const char *vals[] = {"0", "1", "auto", "AUTO", "2", "yes", "", " 1"};
    int want[] = {0, 1, 2, 2, -1, -1, -1, -1};
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        setenv("BRAID_P2P_NT_SLOTS", vals[i], 1);
        int v = 7;
        braid_result_t r = braid_param_switch("P2P_NT_SLOTS", &v);
        if (want[i] < 0) {
            cr_assert_eq(r, BRAID_ERR_INVALID_ARG, "'%s' taken as %d", vals[i], v);
            cr_assert(strstr(braid_last_error(), "BRAID_P2P_NT_SLOTS="), "%s", braid_last_error());
        } else {
            cr_assert_eq(r, BRAID_SUCCESS, "'%s': %s", vals[i], braid_last_error());
            cr_assert_eq(v, want[i], "'%s' read as %d", vals[i], v);
        }
    }
    unsetenv("BRAID_P2P_NT_SLOTS");
    int v = 7;
    cr_assert_eq(braid_param_switch("DIRECT_NT_SLOTS", &v), BRAID_SUCCESS);
    cr_assert_eq(v, 2, "the default is auto");
}

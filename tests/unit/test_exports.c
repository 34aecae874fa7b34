/* Every function a public header declares with BRAID_API is exported by its shared library,
 * and the library exports nothing else (nm -D). A header include/braid/X.h belongs to
 * libbraid_X.so (braid.h to libbraid.so), unless it names its library in a line
 * "Library libNAME" of its opening comment; a header whose library was not built is skipped
 * with a note, so headers other parts add are checked as soon as their library exists. */
#include "braid/braid.h"

#include <criterion/criterion.h>
#include <criterion/logging.h>
#include <ctype.h>
#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_NAMES 1024

typedef struct {
    char *names[MAX_NAMES];
    int n;
} nameset_t;

static int has(const nameset_t *s, const char *name)
{
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) return 1;
    return 0;
}

static void add(nameset_t *s, const char *name)
{
    if (has(s, name)) return;
    cr_assert_lt(s->n, MAX_NAMES);
    s->names[s->n++] = strdup(name);
}

static void names_free(nameset_t *s)
{
    for (int i = 0; i < s->n; i++)
        free(s->names[i]);
    s->n = 0;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = calloc(1, (size_t)len + 1);
    cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    return buf;
}

/* Blanks out comments and preprocessor lines (BRAID_API's own #define). */
static void strip(char *s)
{
    for (char *p = s; *p; p++) {
        if (p[0] == '/' && p[1] == '*') {
            char *e = strstr(p + 2, "*/");
            char *end = e ? e + 2 : p + strlen(p);
            for (; p < end; p++)
                if (*p != '\n') *p = ' ';
            p--;
        } else if (p[0] == '/' && p[1] == '/') {
            for (; *p && *p != '\n'; p++)
                *p = ' ';
            p--;
        } else if (*p == '#' && (p == s || p[-1] == '\n')) {
            for (; *p && !(*p == '\n' && p[-1] != '\\'); p++)
                *p = ' ';
            p--;
        }
    }
}

/* The names declared "BRAID_API <type> name(": the identifier before the first '('. */
static void header_names(const char *path, nameset_t *out, char *lib, size_t liblen)
{
    char *text = slurp(path);
    const char *l = strstr(text, "Library lib");
    if (l && l < text + 2000) { /* named in the opening comment */
        l += strlen("Library ");
        size_t k = 0;
        while ((isalnum((unsigned char)l[k]) || l[k] == '_') && k + 1 < liblen)
            k++;
        snprintf(lib, liblen, "%.*s.so", (int)k, l);
    }
    strip(text);
    for (char *p = text; (p = strstr(p, "BRAID_API")); p += 9) {
        if (p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) continue;
        if (isalnum((unsigned char)p[9]) || p[9] == '_') continue;
        char *paren = strchr(p, '('), *semi = strchr(p, ';');
        cr_assert(paren && (!semi || paren < semi), "%s: BRAID_API without a function: %.60s", path,
                  p);
        char *e = paren;
        while (e > p && isspace((unsigned char)e[-1]))
            e--;
        char *b = e;
        while (b > p && (isalnum((unsigned char)b[-1]) || b[-1] == '_'))
            b--;
        cr_assert(e > b, "%s: no name before '(': %.60s", path, p);
        char name[128];
        snprintf(name, sizeof(name), "%.*s", (int)(e - b), b);
        add(out, name);
    }
    free(text);
}

static void library_exports(const char *lib, nameset_t *out)
{
    char cmd[2 * PATH_MAX + 512], line[512];
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", lib);
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    while (fgets(line, sizeof(line), p)) {
        char addr[64], type[8], name[256];
        if (sscanf(line, "%63s %7s %255s", addr, type, name) != 3) continue;
        char *at = strchr(name, '@'); /* symbol versions */
        if (at) *at = '\0';
        /* Provided by the linker or the C runtime in every shared object. */
        static const char *const rt[] = {"_init", "_fini", "_edata", "_end", "__bss_start"};
        int skip = 0;
        for (size_t i = 0; i < sizeof(rt) / sizeof(rt[0]); i++)
            skip |= !strcmp(name, rt[i]);
        if (!skip) add(out, name);
    }
    cr_assert_eq(pclose(p), 0, "%s failed (is binutils installed?)", cmd);
}

Test(exports, every_braid_api_exported_and_nothing_else, .timeout = 60)
{
    char exe[PATH_MAX], libdir[PATH_MAX + 8], incdir[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    cr_assert(n > 0);
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0'; /* build/bin */
    snprintf(libdir, sizeof(libdir), "%s/../lib", exe);
    snprintf(incdir, sizeof(incdir), "%s/include/braid", BRAID_SOURCE_DIR);

    DIR *d = opendir(incdir);
    cr_assert(d, "%s", incdir);
    struct dirent *e;
    int checked = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 3 || strcmp(e->d_name + len - 2, ".h")) continue;
        char hdr[PATH_MAX + 300], lib[128], libpath[PATH_MAX + 300];
        snprintf(hdr, sizeof(hdr), "%s/%s", incdir, e->d_name);
        if (!strcmp(e->d_name, "braid.h"))
            snprintf(lib, sizeof(lib), "libbraid.so");
        else
            snprintf(lib, sizeof(lib), "libbraid_%.*s.so", (int)(len - 2), e->d_name);
        nameset_t declared = {0}, exported = {0};
        header_names(hdr, &declared, lib, sizeof(lib));
        if (declared.n == 0) continue; /* types only */
        snprintf(libpath, sizeof(libpath), "%s/%s", libdir, lib);
        if (access(libpath, R_OK) != 0) {
            cr_log_warn("%s: %s not built here; its exports are not checked", e->d_name, lib);
            names_free(&declared);
            continue;
        }
        library_exports(libpath, &exported);
        for (int i = 0; i < declared.n; i++)
            cr_expect(has(&exported, declared.names[i]), "%s declares %s, %s does not export it",
                      e->d_name, declared.names[i], lib);
        for (int i = 0; i < exported.n; i++)
            cr_expect(has(&declared, exported.names[i]),
                      "%s exports %s, which %s does not declare with BRAID_API", lib,
                      exported.names[i], e->d_name);
        checked++;
        names_free(&declared);
        names_free(&exported);
    }
    closedir(d);
    cr_assert_geq(checked, 1, "libbraid.so was not checked");
}

/* The parser itself: a declaration over two lines, a comment and a #define are handled. */
Test(exports, header_parser)
{
    char path[] = "/tmp/braid-hdr-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    const char *text = "/* Library libbraid_demo, linked to libbraid. BRAID_API fake(\n */\n"
                       "#define BRAID_API __attribute__((visibility(\"default\")))\n"
                       "BRAID_API braid_result_t braid_demo_a(int x,\n    int y);\n"
                       "BRAID_API const char *\nbraid_demo_b (void); // BRAID_API no(\n"
                       "typedef int BRAID_APIX;\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    nameset_t s = {0};
    char lib[128] = "libbraid_x.so";
    header_names(path, &s, lib, sizeof(lib));
    unlink(path);
    cr_assert_eq(s.n, 2);
    cr_assert_str_eq(s.names[0], "braid_demo_a");
    cr_assert_str_eq(s.names[1], "braid_demo_b");
    cr_assert_str_eq(lib, "libbraid_demo.so");
    names_free(&s);
}

/* braid_unique_id_str (declared, and now exported): "host:port" of the root, no secret. */
Test(exports, unique_id_str, .timeout = 30)
{
    braid_unique_id_t id;
    cr_assert_eq(braid_get_unique_id(&id), BRAID_SUCCESS, "%s", braid_last_error());
    char buf[128];
    cr_assert_eq(braid_unique_id_str(&id, buf, sizeof(buf)), BRAID_SUCCESS, "%s",
                 braid_last_error());
    char *colon = strrchr(buf, ':');
    cr_assert(colon && colon > buf, "%s", buf);
    long port = strtol(colon + 1, NULL, 10);
    cr_assert(port > 0 && port < 65536, "%s", buf);
    /* No byte of the secret (bytes 24..39 of the id) shows as hex. */
    char hex[40];
    const unsigned char *raw = (const unsigned char *)&id;
    snprintf(hex, sizeof(hex), "%02x%02x%02x%02x", raw[24], raw[25], raw[26], raw[27]);
    cr_assert_null(strstr(buf, hex), "%s", buf);
    char tiny[4];
    cr_assert_eq(braid_unique_id_str(&id, tiny, sizeof(tiny)), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "len: 4 bytes cannot hold"), "%s", braid_last_error());
    cr_assert_str_eq(tiny, "");
    cr_assert_eq(braid_unique_id_str(NULL, buf, sizeof(buf)), BRAID_ERR_INVALID_ARG);
    cr_assert_eq(braid_unique_id_str(&id, NULL, 8), BRAID_ERR_INVALID_ARG);
    braid_unique_id_t junk;
    memset(&junk, 0x5a, sizeof(junk));
    cr_assert_eq(braid_unique_id_str(&junk, buf, sizeof(buf)), BRAID_ERR_INVALID_ARG);
    cr_assert(strstr(braid_last_error(), "not a braid unique id"), "%s", braid_last_error());
}

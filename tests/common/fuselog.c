#include "fuselog.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int fuselog_start(char *dir)
{
    char file[64];
    strcpy(dir, "/tmp/braid-fuse-XXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(file, sizeof(file), "%s/%%p.log", dir);
    setenv("BRAID_DEBUG", "DEBUG", 1);
    setenv("BRAID_DEBUG_SUBSYS", "COLL", 1);
    setenv("BRAID_DEBUG_FILE", file, 1);
    return 0;
}

int fuselog_count(const char *dir, const char *const *what, int nwhat, int *lines, int *calls)
{
    for (int i = 0; i < nwhat; i++)
        lines[i] = calls[i] = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    int files = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[512], line[512];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        files++;
        while (fgets(line, sizeof(line), f))
            for (int i = 0; i < nwhat; i++) {
                const char *p = strstr(line, what[i]);
                if (!p) continue;
                while (p > line && p[-1] != ' ')
                    p--;
                lines[i]++;
                calls[i] += atoi(p);
            }
        fclose(f);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
    return files;
}

void fuselog_rule(const long *bytes, int k, long limit, int *runs, int *fused)
{
    for (int i = 0; i < k;) {
        long sum = 0;
        int j = i;
        while (j < k && bytes[j] >= 0 && bytes[j] <= limit / 4 && sum + bytes[j] <= limit)
            sum += bytes[j++];
        if (j - i >= 2) {
            (*runs)++;
            *fused += j - i;
        }
        i = j > i ? j : i + 1;
    }
}

/* The debug logs the group fusion tests count (core/group_fuse.c's "N <coll>s fused" lines):
 * one file per process in a fresh folder. */
#ifndef BRAID_TEST_FUSELOG_H
#define BRAID_TEST_FUSELOG_H

/* Makes a folder (its path into dir, at least 32 bytes) and sets BRAID_DEBUG* so that every
 * process started after logs its COLL debug lines to its own file there. 0, or -1. */
int fuselog_start(char *dir);
/* For each what[i] (" allreduces fused", ...), counts the lines of the folder's files holding
 * it (lines[i]) and adds up the numbers written just before it (calls[i]); removes the files
 * and the folder. Returns the number of files, or -1 when the folder cannot be read. */
int fuselog_count(const char *dir, const char *const *what, int nwhat, int *lines, int *calls);
/* The fusion rule (group_fuse.c) applied to one group's calls of bytes[] (each call's largest
 * buffer; -1 ends a run without being part of one) with BRAID_GROUP_FUSE_BYTES = limit: adds
 * the runs of two or more calls to *runs and their calls to *fused. */
void fuselog_rule(const long *bytes, int k, long limit, int *runs, int *fused);

#endif

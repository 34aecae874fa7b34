/* Fashion-MNIST from Debian's dataset-fashion-mnist package: gzipped IDX files (big-endian
 * magic 0x00000803 for images, 0x00000801 for labels, then the dimensions), read with zlib.
 * Pixels are kept as bytes; dataset_rows scales them to [0, 1] and standardises them with the
 * training set's mean and deviation. */
#include "ddp_mlp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static int read_all(gzFile f, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        unsigned chunk = len - got > (1u << 30) ? (1u << 30) : (unsigned)(len - got);
        int k = gzread(f, (char *)buf + got, chunk);
        if (k <= 0) return -1;
        got += (size_t)k;
    }
    return 0;
}

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Opens path, checks the magic and reads ndims dimensions. */
static gzFile open_idx(const char *path, uint32_t magic, int ndims, uint32_t *dims)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        fprintf(stderr,
                "ddp_mlp: cannot open %s (apt-get install dataset-fashion-mnist, or --data "
                "DIR)\n",
                path);
        return NULL;
    }
    unsigned char h[16];
    if (read_all(f, h, 4 + 4 * (size_t)ndims) || be32(h) != magic) {
        fprintf(stderr, "ddp_mlp: %s is not an IDX file with magic 0x%08x\n", path, magic);
        gzclose(f);
        return NULL;
    }
    for (int i = 0; i < ndims; i++)
        dims[i] = be32(h + 4 + 4 * i);
    return f;
}

int dataset_load(dataset_t *d, const char *dir, const char *prefix, int limit)
{
    memset(d, 0, sizeof(*d));
    char path[1024];
    uint32_t di[3], dl[1];
    snprintf(path, sizeof(path), "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    gzFile fi = open_idx(path, 0x803, 3, di);
    if (!fi) return -1;
    snprintf(path, sizeof(path), "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    gzFile fl = open_idx(path, 0x801, 1, dl);
    if (!fl) {
        gzclose(fi);
        return -1;
    }
    int rc = -1;
    if (dl[0] != di[0] || di[1] * di[2] != 784) {
        fprintf(stderr, "ddp_mlp: %s: %u images of %ux%u but %u labels\n", prefix, di[0], di[1],
                di[2], dl[0]);
        goto out;
    }
    d->n = (int)di[0];
    if (limit > 0 && limit < d->n) d->n = limit;
    d->dim = 784;
    size_t npix = (size_t)d->n * 784;
    unsigned char *raw = malloc(npix);
    d->pix = raw;
    d->label = malloc((size_t)d->n);
    if (!raw || !d->label) {
        fprintf(stderr, "ddp_mlp: out of memory\n");
        goto out;
    }
    if (read_all(fi, raw, npix) || read_all(fl, d->label, (size_t)d->n)) {
        fprintf(stderr, "ddp_mlp: %s: truncated file\n", prefix);
        goto out;
    }
    for (int i = 0; i < d->n; i++)
        if (d->label[i] > 9) {
            fprintf(stderr, "ddp_mlp: %s: label %d out of range\n", prefix, d->label[i]);
            goto out;
        }
    rc = 0;
out:
    gzclose(fi);
    gzclose(fl);
    if (rc) dataset_free(d);
    return rc;
}

void dataset_rows(const dataset_t *d, const int *idx, int k, float *out)
{
    /* Fashion-MNIST training set: mean 0.2860, standard deviation 0.3530 (of pixel / 255). */
    for (int r = 0; r < k; r++) {
        const uint8_t *p = d->pix + (size_t)idx[r] * 784;
        float *o = out + (size_t)r * 784;
        for (int j = 0; j < 784; j++)
            o[j] = ((float)p[j] * (1.0f / 255.0f) - 0.2860f) * (1.0f / 0.3530f);
    }
}

void dataset_free(dataset_t *d)
{
    free(d->pix);
    free(d->label);
    memset(d, 0, sizeof(*d));
}

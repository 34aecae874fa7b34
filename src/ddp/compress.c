/* Gradient compression hooks: a float32 bucket is cast to float16 or bfloat16 (round to
 * nearest even), all-reduced in that type (braid reduces float16/bfloat16 in float32 and
 * rounds once per step), and cast back in complete(). For BRAID_AVG the gradients are first
 * multiplied by 1/n in float32 and the quotients summed (as torch's fp16_compress_hook
 * divides before the cast), so partial sums stay within the average's range. Half the bytes
 * on the wire; the price is the narrow type's precision (11 or 8 significant bits) and, for
 * float16, its range (|x| >= 65520 becomes infinity, below 2^-24 zero). Buckets of other
 * dtypes are reduced uncompressed. The hook's state holds one wire buffer per bucket, grown
 * as needed. */
#include "ddp_impl.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    braid_datatype_t wire;
    int nbufs;
    void **bufs;
    size_t *caps;
} compress_state_t;

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_f16(float f)
{
    uint32_t x = bits_of(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) return sign | (x > 0x7f800000u ? 0x7e00 : 0x7c00); /* NaN, inf */
    if (x >= 0x477ff000u) return sign | 0x7c00; /* >= 65520 rounds to infinity */
    if (x < 0x38800000u) {                      /* below 2^-14: float16 subnormal or zero */
        if (x < 0x33000000u) return sign;       /* below 2^-25 */
        uint32_t e = x >> 23, m = (x & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* m * 2^(e-150) in units of 2^-24 */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return sign | (uint16_t)r;
    }
    uint32_t r = (x - 0x38000000u) >> 13, rem = x & 0x1fffu; /* exponent 127 -> 15 */
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
    return sign | (uint16_t)r;
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023;
    if (e == 0) {
        float v = (float)m * 0x1p-24f; /* exact: m < 2^10 */
        return sign ? -v : v;
    }
    if (e == 31) return float_of(sign | 0x7f800000u | (m << 13));
    return float_of(sign | ((e + 112) << 23) | (m << 13));
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x = bits_of(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t b)
{
    return float_of((uint32_t)b << 16);
}

braid_result_t braid_ddp_cast(const void *in, braid_datatype_t in_dtype, void *out,
                              braid_datatype_t out_dtype, size_t count)
{
    if (count && (!in || !out)) return ddp_set_error(BRAID_ERR_INVALID_ARG, "cast: NULL buffer");
    const int narrow_out = out_dtype == BRAID_FLOAT16 || out_dtype == BRAID_BFLOAT16;
    const int narrow_in = in_dtype == BRAID_FLOAT16 || in_dtype == BRAID_BFLOAT16;
    if (in_dtype == BRAID_FLOAT32 && narrow_out) {
        const float *f = in;
        uint16_t *h = out;
        if (out_dtype == BRAID_FLOAT16)
            for (size_t i = 0; i < count; i++)
                h[i] = f32_to_f16(f[i]);
        else
            for (size_t i = 0; i < count; i++)
                h[i] = f32_to_bf16(f[i]);
        return BRAID_SUCCESS;
    }
    if (narrow_in && out_dtype == BRAID_FLOAT32) {
        const uint16_t *h = in;
        float *f = out;
        if (in_dtype == BRAID_FLOAT16)
            for (size_t i = 0; i < count; i++)
                f[i] = f16_to_f32(h[i]);
        else
            for (size_t i = 0; i < count; i++)
                f[i] = bf16_to_f32(h[i]);
        return BRAID_SUCCESS;
    }
    return ddp_set_error(BRAID_ERR_UNSUPPORTED,
                         "cast: %s -> %s (float32 <-> float16/bfloat16 only)",
                         braid_dtype_name(in_dtype), braid_dtype_name(out_dtype));
}

static braid_result_t compress_launch(void *state, const braid_ddp_bucket_t *b,
                                      braid_request_t *req_p)
{
    compress_state_t *s = state;
    if (b->dtype != BRAID_FLOAT32)
        return braid_iallreduce(b->data, b->data, b->count, b->dtype, b->op, b->comm, req_p);
    if (b->index >= s->nbufs) {
        int n = b->index + 1;
        void **bufs = realloc(s->bufs, (size_t)n * sizeof(void *));
        if (!bufs) return ddp_set_error(BRAID_ERR_NOMEM, "compress hook: out of memory");
        s->bufs = bufs;
        size_t *caps = realloc(s->caps, (size_t)n * sizeof(size_t));
        if (!caps) return ddp_set_error(BRAID_ERR_NOMEM, "compress hook: out of memory");
        s->caps = caps;
        for (int i = s->nbufs; i < n; i++) {
            s->bufs[i] = NULL;
            s->caps[i] = 0;
        }
        s->nbufs = n;
    }
    if (s->caps[b->index] < b->count) {
        void *p = realloc(s->bufs[b->index], b->count * sizeof(uint16_t));
        if (!p) return ddp_set_error(BRAID_ERR_NOMEM, "compress hook: out of memory");
        s->bufs[b->index] = p;
        s->caps[b->index] = b->count;
    }
    uint16_t *w = s->bufs[b->index];
    if (b->op != BRAID_AVG) {
        braid_ddp_cast(b->data, BRAID_FLOAT32, w, s->wire, b->count);
        return braid_iallreduce(w, w, b->count, s->wire, b->op, b->comm, req_p);
    }
    /* divide first, in float32, and sum the quotients: braid's avg sums in the wire type
     * (every step rounds its partial sum to it: float16 overflows once a partial sum passes
     * 65504, even where the average fits) and divides at the end */
    int n = 1;
    if (braid_comm_size(b->comm, &n) != BRAID_SUCCESS || n < 1) n = 1;
    const float inv = 1.0f / (float)n, *f = b->data;
    if (s->wire == BRAID_FLOAT16)
        for (size_t i = 0; i < b->count; i++)
            w[i] = f32_to_f16(f[i] * inv);
    else
        for (size_t i = 0; i < b->count; i++)
            w[i] = f32_to_bf16(f[i] * inv);
    return braid_iallreduce(w, w, b->count, s->wire, BRAID_SUM, b->comm, req_p);
}

static braid_result_t compress_complete(void *state, const braid_ddp_bucket_t *b)
{
    compress_state_t *s = state;
    if (b->dtype != BRAID_FLOAT32) return BRAID_SUCCESS;
    return braid_ddp_cast(s->bufs[b->index], s->wire, b->data, BRAID_FLOAT32, b->count);
}

braid_result_t braid_ddp_hook_compress(braid_ddp_hook_t *hook_p, braid_datatype_t wire_dtype)
{
    if (!hook_p) return ddp_set_error(BRAID_ERR_INVALID_ARG, "hook_p is NULL");
    if (wire_dtype != BRAID_FLOAT16 && wire_dtype != BRAID_BFLOAT16)
        return ddp_set_error(BRAID_ERR_INVALID_ARG,
                             "wire_dtype %s: the compression hooks send float16 or bfloat16",
                             braid_dtype_name(wire_dtype));
    compress_state_t *s = calloc(1, sizeof(*s));
    if (!s) return ddp_set_error(BRAID_ERR_NOMEM, "out of memory");
    s->wire = wire_dtype;
    hook_p->launch = compress_launch;
    hook_p->complete = compress_complete;
    hook_p->next = NULL;
    hook_p->state = s;
    return BRAID_SUCCESS;
}

void braid_ddp_hook_compress_free(braid_ddp_hook_t *hook)
{
    if (!hook || hook->launch != compress_launch) return;
    compress_state_t *s = hook->state;
    for (int i = 0; s && i < s->nbufs; i++)
        free(s->bufs[i]);
    if (s) {
        free(s->bufs);
        free(s->caps);
    }
    free(s);
    hook->state = NULL;
}

/* parse_bytes for the standalone perf tools (membw, xcore, tcpbw): "256M" -> 268435456 (K, M, G:
 * powers of 1024); 0 when it is not a size. */
#ifndef BRAID_PERF_PARSE_BYTES_H
#define BRAID_PERF_PARSE_BYTES_H

#include <stdint.h>
#include <stdlib.h>

/* Before it, membw read "256M" with strtoull as 256 bytes, and every figure compare.sh printed
 * was of 256 bytes. */
static size_t parse_bytes(const char *s)
{
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10;
    if (*end == 'M' || *end == 'm') shift = 20;
    if (*end == 'G' || *end == 'g') shift = 30;
    if (shift) end++;
    if (end == s || *end || v > (SIZE_MAX >> shift)) return 0;
    return (size_t)v << shift;
}

#endif

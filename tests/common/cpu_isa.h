/* Which ISA paths of the CPU reduction kernels this CPU runs (as src/reduce/reduce.c decides):
 * the tests that force each path with BRAID_REDUCE_ISA skip the ones it lacks. Shared by
 * tests/unit/test_reduce.c, test_reduce_many.c and test_scale.c. */
#ifndef BRAID_TEST_CPU_ISA_H
#define BRAID_TEST_CPU_ISA_H

#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif

/* Whether this CPU runs the reduction kernels' ISA path isa (as src/reduce/reduce.c decides). */
static inline int cpu_has(const char *isa)
{
    if (!strcmp(isa, "generic")) return 1;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!strcmp(isa, "avx2")) {
        unsigned a, b, c, d; /* F16C: CPUID.1:ECX bit 29 */
        return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
    }
    if (!strcmp(isa, "avx512"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
#endif
    return 0;
}

#endif

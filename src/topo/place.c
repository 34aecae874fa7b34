/* Where this process runs in the machine that hw.c discovered: the NUMA node of its cpus, the
 * NICs and GPUs local to them (what a rank publishes to its peers at init), and pinning of
 * braid's own threads. */
#include "core/config.h"
#include "core/log.h"
#include "topo/topo.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void braid_topo_locate(braid_topo_hw_t *hw, const cpu_set_t *cpus)
{
    hw->my_numa = -1;
    for (int i = 0; i < hw->nnode_sets; i++) {
        cpu_set_t both;
        CPU_AND(&both, &hw->node_cpus[i], cpus);
        if (CPU_COUNT(cpus) > 0 && CPU_EQUAL(&both, cpus)) hw->my_numa = hw->node_id[i];
    }
    int single = hw->nnuma <= 1;
    if (single && hw->my_numa < 0) hw->my_numa = hw->nnode_sets == 1 ? hw->node_id[0] : 0;
    for (int k = 0; k < 2; k++) {
        braid_topo_dev_t *devs = k ? hw->gpu : hw->nic;
        int n = k ? hw->ngpus : hw->nnics;
        for (int i = 0; i < n; i++) {
            braid_topo_dev_t *d = &devs[i];
            if (single)
                d->local = 1; /* VMs often report numa_node -1, yet there is only one node */
            else
                d->local = d->numa < 0 || hw->my_numa < 0 ? -1 : d->numa == hw->my_numa;
        }
    }
}

void braid_topo_numa_cpus(const braid_topo_hw_t *hw, const cpu_set_t *cpus, cpu_set_t *out)
{
    cpu_set_t acc;
    CPU_ZERO(&acc);
    for (int i = 0; i < hw->nnode_sets; i++) {
        cpu_set_t both;
        CPU_AND(&both, &hw->node_cpus[i], cpus);
        if (CPU_COUNT(&both)) CPU_OR(&acc, &acc, &hw->node_cpus[i]);
    }
    /* cpus outside every known node (or no nodes known) stay as they are */
    CPU_OR(&acc, &acc, cpus);
    *out = acc;
}

void braid_topo_cpulist_parse(const char *s, cpu_set_t *set)
{
    CPU_ZERO(set);
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s) break;
        if (*end == '-') b = strtol(end + 1, &end, 10);
        for (long c = a; c <= b && c < CPU_SETSIZE; c++)
            CPU_SET((int)c, set);
        s = *end == ',' ? end + 1 : end;
        if (*s == '\n') break;
    }
}

void braid_topo_cpulist(const cpu_set_t *set, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int c = 0; c < CPU_SETSIZE && used < len; c++) {
        if (!CPU_ISSET(c, set)) continue;
        int e = c;
        while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, set))
            e++;
        int w = e > c ? snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", c, e)
                      : snprintf(buf + used, len - used, "%s%d", used ? "," : "", c);
        if (w < 0) break;
        used += (size_t)w;
        c = e;
    }
    if (!used) snprintf(buf, len, "none");
}

/* Is device node numa on a node this process counts as its own? */
static int dev_is_local(const braid_topo_hw_t *hw, const braid_topo_dev_t *d, int forced,
                        const cpu_set_t *cpus)
{
    if (forced >= 0) return d->numa == forced || (hw->nnuma <= 1 && d->numa < 0 && forced == 0);
    if (hw->nnuma <= 1) return 1;
    for (int i = 0; i < hw->nnode_sets; i++) {
        if (hw->node_id[i] != d->numa) continue;
        cpu_set_t both;
        CPU_AND(&both, &hw->node_cpus[i], cpus);
        return CPU_COUNT(&both) > 0;
    }
    return 0;
}

braid_result_t braid_topo_place(const cpu_set_t *cpus, braid_topo_place_t *place_p)
{
    braid_topo_place_t p;
    memset(&p, 0, sizeof(p));
    int forced = -1;
    const char *s = braid_param_str("NUMA_ID");
    if (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno || end == s || *end || v < -1 || v > 1 << 20)
            return braid_set_error(BRAID_ERR_INVALID_ARG,
                                   "BRAID_NUMA_ID='%s' is not a NUMA node number (or -1)", s);
        forced = (int)v;
        p.numa_forced = 1;
    }
    braid_topo_dev_t hook[BRAID_TOPO_MAX_DEVS];
    int nhook;
    BRAID_CHECK(braid_topo_nic_hook_parse(braid_param_str("NIC_NUMA"), hook, &nhook));
    braid_topo_hw_t *hw = malloc(sizeof(*hw));
    if (!hw) return braid_set_error(BRAID_ERR_NOMEM, "topology: out of memory");
    braid_topo_discover(hw); /* with BRAID_NIC_NUMA's NICs */
    braid_topo_locate(hw, cpus);
    p.numa = p.numa_forced ? forced : hw->my_numa;
    for (int i = 0; i < hw->nnics && p.nnics < BRAID_TOPO_PEER_DEVS; i++)
        if (dev_is_local(hw, &hw->nic[i], p.numa_forced ? p.numa : -1, cpus))
            snprintf(p.nic[p.nnics++], sizeof(p.nic[0]), "%.15s", hw->nic[i].name);
    for (int i = 0; i < hw->ngpus && p.ngpus < BRAID_TOPO_PEER_DEVS; i++)
        if (dev_is_local(hw, &hw->gpu[i], p.numa_forced ? p.numa : -1, cpus))
            snprintf(p.gpu[p.ngpus++], sizeof(p.gpu[0]), "%.15s", hw->gpu[i].name);
    free(hw);
    *place_p = p;
    return BRAID_SUCCESS;
}

int braid_topo_pin_self(const char *name, const cpu_set_t *cpus)
{
    char n[16];
    snprintf(n, sizeof(n), "%.15s", name);
    pthread_setname_np(pthread_self(), n);
    if (!cpus) return 0;
    return pthread_setaffinity_np(pthread_self(), sizeof(*cpus), cpus);
}

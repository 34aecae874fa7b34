/* Local hardware discovery: hwloc when braid is built with it (packages, NUMA nodes and their
 * cpus, cores, PUs, PCI NICs and GPUs and the NUMA node each hangs off), else the same from
 * sysfs (less precise: no PCI hierarchy, only the kernel's numa_node of each device), and the
 * result says which source it came from. Done once per process (hwloc takes ~20 ms); where the
 * calling thread runs is worked out from its affinity each time (place.c). braid never moves a
 * rank: placement is the launcher's (mpirun --bind-to, numactl, taskset); it only keeps its
 * own threads near the rank's cpus (BRAID_THREAD_AFFINITY). */
#include "core/config.h"
#include "core/log.h"
#include "topo/topo.h"

#include <dirent.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if BRAID_HAVE_HWLOC
#include <hwloc.h>
#endif

static void dev_add(braid_topo_dev_t *devs, int *n, const char *name, int numa)
{
    if (*n >= BRAID_TOPO_MAX_DEVS) return;
    braid_topo_dev_t *d = &devs[(*n)++];
    snprintf(d->name, sizeof(d->name), "%.31s", name);
    d->numa = numa;
    d->local = -1; /* braid_topo_locate */
}

static cpu_set_t *node_add(braid_topo_hw_t *hw, int node)
{
    if (hw->nnode_sets >= BRAID_TOPO_MAX_NUMA) return NULL;
    hw->node_id[hw->nnode_sets] = node;
    CPU_ZERO(&hw->node_cpus[hw->nnode_sets]);
    return &hw->node_cpus[hw->nnode_sets++];
}

/* ---- sysfs ---------------------------------------------------------------------------------- */
static int read_int_file(const char *path, int dflt)
{
    FILE *f = fopen(path, "r");
    if (!f) return dflt;
    int v;
    if (fscanf(f, "%i", &v) != 1) v = dflt;
    fclose(f);
    return v;
}

static void discover_sysfs(braid_topo_hw_t *hw)
{
    hw->source = "sysfs";
    long npus = sysconf(_SC_NPROCESSORS_ONLN);
    hw->npus = npus > 0 ? (int)npus : 0;
    /* Packages and cores: distinct ids over the online cpus (ids are small integers). */
    enum { MAXID = 4096 };
    unsigned char *seen_pkg = calloc(MAXID, 1), *seen_core = calloc((size_t)MAXID * 8, 1);
    char path[256];
    for (int c = 0; c < hw->npus && seen_pkg && seen_core; c++) {
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 c);
        int pkg = read_int_file(path, 0);
        snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
        int core = read_int_file(path, c);
        if (pkg < 0 || pkg >= 8) pkg = 0;
        if (core < 0 || core >= MAXID) core = c % MAXID;
        hw->npackages += !seen_pkg[pkg];
        seen_pkg[pkg] = 1;
        hw->ncores += !seen_core[pkg * MAXID + core];
        seen_core[pkg * MAXID + core] = 1;
    }
    free(seen_pkg);
    free(seen_core);
    DIR *d = opendir("/sys/devices/system/node");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int node;
        char tail;
        if (sscanf(e->d_name, "node%d%c", &node, &tail) != 1) continue;
        hw->nnuma++;
        snprintf(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", node);
        FILE *f = fopen(path, "r");
        char list[1024] = "";
        if (f) {
            if (!fgets(list, sizeof(list), f)) list[0] = '\0';
            fclose(f);
        }
        cpu_set_t *set = node_add(hw, node);
        if (set) braid_topo_cpulist_parse(list, set);
    }
    if (d) closedir(d);
    if (hw->nnuma == 0) hw->nnuma = 1;
    /* NICs with a device behind them (not lo, veth, bridges). */
    d = opendir("/sys/class/net");
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "/sys/class/net/%.64s/device", e->d_name);
        if (access(path, F_OK)) continue;
        snprintf(path, sizeof(path), "/sys/class/net/%.64s/device/numa_node", e->d_name);
        dev_add(hw->nic, &hw->nnics, e->d_name, read_int_file(path, -1));
    }
    if (d) closedir(d);
    /* GPUs: PCI display controllers (class 0x03xxxx). */
    d = opendir("/sys/bus/pci/devices");
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%.64s/class", e->d_name);
        int cls = read_int_file(path, 0);
        if ((cls >> 16) != 0x03) continue;
        snprintf(path, sizeof(path), "/sys/bus/pci/devices/%.64s/numa_node", e->d_name);
        dev_add(hw->gpu, &hw->ngpus, e->d_name, read_int_file(path, -1));
    }
    if (d) closedir(d);
}

/* ---- hwloc --------------------------------------------------------------------------------- */
#if BRAID_HAVE_HWLOC
static int obj_numa(hwloc_obj_t anc)
{
    if (!anc || !anc->nodeset || hwloc_bitmap_weight(anc->nodeset) != 1) return -1;
    return hwloc_bitmap_first(anc->nodeset);
}

static int discover_hwloc(braid_topo_hw_t *hw)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo)) return -1;
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
#if HWLOC_API_VERSION >= 0x00020100
    /* hwloc's own Linux backend reads the PCI tree from sysfs; the libpciaccess plugin adds
     * nothing braid uses and leaks at exit (it would fail the LeakSanitizer runs). */
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
#endif
    if (hwloc_topology_load(topo)) {
        hwloc_topology_destroy(topo);
        return -1;
    }
    hw->source = "hwloc";
    hw->npackages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
    hw->nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    hw->ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
    hw->npus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    hwloc_obj_t node = NULL;
    while ((node = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, node))) {
        cpu_set_t *set = node->cpuset ? node_add(hw, (int)node->os_index) : NULL;
        for (int cpu = set ? hwloc_bitmap_first(node->cpuset) : -1; cpu >= 0 && cpu < CPU_SETSIZE;
             cpu = hwloc_bitmap_next(node->cpuset, cpu))
            CPU_SET(cpu, set);
    }
    for (hwloc_obj_t o = hwloc_get_next_osdev(topo, NULL); o; o = hwloc_get_next_osdev(topo, o))
        if (o->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK && o->name)
            dev_add(hw->nic, &hw->nnics, o->name, obj_numa(hwloc_get_non_io_ancestor_obj(topo, o)));
    for (hwloc_obj_t o = hwloc_get_next_pcidev(topo, NULL); o; o = hwloc_get_next_pcidev(topo, o)) {
        if ((o->attr->pcidev.class_id >> 8) != 0x03) continue;
        char bus[32];
        snprintf(bus, sizeof(bus), "%04x:%02x:%02x.%01x", o->attr->pcidev.domain,
                 o->attr->pcidev.bus, o->attr->pcidev.dev, o->attr->pcidev.func);
        dev_add(hw->gpu, &hw->ngpus, bus, obj_numa(hwloc_get_non_io_ancestor_obj(topo, o)));
    }
    hwloc_topology_destroy(topo);
    return 0;
}
#endif

static braid_topo_hw_t machine;
static pthread_once_t machine_once = PTHREAD_ONCE_INIT;

static void discover_machine(void)
{
    braid_topo_hw_t *hw = &machine;
    memset(hw, 0, sizeof(*hw));
#if BRAID_HAVE_HWLOC
    if (discover_hwloc(hw) == 0) return;
    memset(hw, 0, sizeof(*hw));
    braid_info(INIT, "hwloc could not load the topology; using sysfs");
#else
    braid_debug(INIT, "built without hwloc; topology from sysfs (less precise)");
#endif
    discover_sysfs(hw);
}

void braid_topo_discover(braid_topo_hw_t *hw)
{
    pthread_once(&machine_once, discover_machine);
    *hw = machine;
    /* The BRAID_NIC_NUMA test hook replaces the NICs (braid_topo_place reports a bad one). */
    braid_topo_dev_t hook[BRAID_TOPO_MAX_DEVS];
    int nhook = 0;
    const char *spec = braid_param_str("NIC_NUMA");
    if (*spec && braid_topo_nic_hook_parse(spec, hook, &nhook) == BRAID_SUCCESS) {
        memcpy(hw->nic, hook, sizeof(hook));
        hw->nnics = nhook;
        hw->nic_hook = 1;
    }
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof(mine), &mine)) {
        CPU_ZERO(&mine);
        for (int c = 0; c < hw->npus && c < CPU_SETSIZE; c++)
            CPU_SET(c, &mine);
    }
    braid_topo_locate(hw, &mine);
}

void braid_topo_hw_print(const braid_topo_hw_t *hw, FILE *f)
{
    fprintf(f,
            "topology (%s%s): %d package(s), %d NUMA node(s), %d core(s), %d PU(s); this "
            "process runs on NUMA node %d%s\n",
            hw->source, strcmp(hw->source, "hwloc") ? ", degraded" : "", hw->npackages, hw->nnuma,
            hw->ncores, hw->npus, hw->my_numa, hw->my_numa < 0 ? " (several or unknown)" : "");
    for (int i = 0; i < hw->nnode_sets; i++) {
        char list[256];
        braid_topo_cpulist(&hw->node_cpus[i], list, sizeof(list));
        fprintf(f, "  NUMA node %d: cpus %s\n", hw->node_id[i], list);
    }
    const char *kind[2] = {"NIC", "GPU"};
    for (int k = 0; k < 2; k++) {
        const braid_topo_dev_t *devs = k ? hw->gpu : hw->nic;
        int n = k ? hw->ngpus : hw->nnics;
        if (!n) fprintf(f, "  %s: none found\n", kind[k]);
        for (int i = 0; i < n; i++)
            fprintf(f, "  %s %s: NUMA node %d, %s\n", kind[k], devs[i].name, devs[i].numa,
                    devs[i].local > 0    ? "local"
                    : devs[i].local == 0 ? "remote"
                                         : "locality unknown");
    }
    fprintf(f,
            "  data NIC: with several NICs that reach every other host, each rank uses one on "
            "its NUMA node (spread by local rank; none there: all, by local rank); else the "
            "route to the root%s\n",
            hw->nic_hook ? "; NICs from BRAID_NIC_NUMA (test hook)" : "");
    fprintf(f, "  braid moves no rank (placement is the launcher's); its threads stay on the "
               "rank's cpus (BRAID_THREAD_AFFINITY)\n");
}

/*
 * fleet-probe: NUMA topology and memory-latency probe for fleet_rollout.
 *
 * Reads the topology from sysfs (or from a fake tree with --sysroot DIR), then on a real machine
 * measures a CPU-node x memory-node latency matrix (random single-cycle pointer chase over a
 * buffer well above the LLC, on huge pages when available, thread pinned, memory bound with mbind)
 * and core-to-core latency (cache-line ping-pong between pinned threads), all within --budget-ms.
 * With --sysroot there is no machine to measure: latencies are MODELLED from the SLIT distances.
 * Prints one JSON document (probe/probe-output.schema.json) on stdout.
 *
 * C11 + libc only. mbind, set_mempolicy, get_mempolicy and sched_setaffinity are called through
 * syscall(2) so no libnuma is needed; the binary is linked statically.
 *
 * Exit status: 0 output written (check quality.ok), 2 usage or topology error, 3 measurement setup
 * error (memory could not be mapped, a pinned thread could not run).
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PROBE_VERSION "1.0.0"
#define SCHEMA_VERSION 1

#define MAX_NODES 64
#define MAX_CPUS 4096
#define LINE 64
#define HUGE_2M (2UL << 20)
#define MIB (1UL << 20)

/* Buffer choice (see docs/probe.md): 8x LLC, floor 64 MiB, cap 1 GiB, at most a quarter of the
 * free memory of the smallest memory node, never below 16 MiB. */
#define BUF_LLC_FACTOR 8
#define BUF_FLOOR (64UL * MIB)
#define BUF_CAP (1024UL * MIB)
#define BUF_ABS_MIN (16UL * MIB)
#define DEFAULT_LLC (32UL * MIB)

/* Model used under --sysroot (deterministic, documented in docs/probe.md). */
#define MODEL_LOCAL_NS 90.0 /* latency_ns = 90 * SLIT distance / 10 */
#define MODEL_C2C_SOCKET_NS 40.0
#define MODEL_C2C_CROSS_NS 100.0

#define MIN_REPS 3
#define MAX_REPS 20000
#define DEFAULT_BUDGET_MS 3000
#define DEFAULT_CV_LIMIT 0.20

/* linux/mempolicy.h */
#define MPOL_DEFAULT 0
#define MPOL_BIND 2
#define MPOL_MF_STRICT (1 << 0)
#define MPOL_MF_MOVE (1 << 1)
#define MPOL_F_NODE (1 << 0)
#define MPOL_F_ADDR (1 << 1)
#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif

/* ------------------------------------------------------------------------------------------ */
/* errors and small helpers                                                                    */

static void die(int code, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void die(int code, const char *fmt, ...)
{
    va_list ap;
    fputs("fleet-probe: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(code);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        die(3, "out of memory (%zu x %zu bytes)", n, size);
    return p;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double my_sqrt(double x)
{
    double r;
    int i;
    if (x <= 0.0)
        return 0.0;
    r = x > 1.0 ? x : 1.0;
    for (i = 0; i < 200; i++) {
        double next = 0.5 * (r + x / r);
        if (next == r)
            break;
        r = next;
    }
    return r;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* CPU time of a thread (CLOCK_THREAD_CPUTIME_ID or a pthread_getcpuclockid clock), -1 if none */
static double cpu_ns(clockid_t id)
{
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return -1.0;
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* A repetition is DISTURBED when the measuring thread was off its CPU (preempted, interrupted)
 * for more than 2% of the wall time plus 5 us: wall time minus thread CPU time. Disturbed reps are
 * counted and left out of the median and CV unless fewer than MIN_REPS clean ones remain. */
static int disturbed(double wall, double cpu)
{
    if (cpu < 0)
        return 0;
    return wall - cpu > 0.02 * wall + 5000.0;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* median of n values (sorts a copy) */
static double median(const double *v, int n)
{
    double *c, m;
    if (n <= 0)
        return 0.0;
    c = xcalloc((size_t)n, sizeof(double));
    memcpy(c, v, (size_t)n * sizeof(double));
    qsort(c, (size_t)n, sizeof(double), cmp_double);
    m = (n % 2) ? c[n / 2] : 0.5 * (c[n / 2 - 1] + c[n / 2]);
    free(c);
    return m;
}

/* coefficient of variation: sample standard deviation / mean */
static double coeff_var(const double *v, int n)
{
    double mean = 0.0, ss = 0.0;
    int i;
    if (n < 2)
        return 0.0;
    for (i = 0; i < n; i++)
        mean += v[i];
    mean /= n;
    if (mean <= 0.0)
        return 0.0;
    for (i = 0; i < n; i++)
        ss += (v[i] - mean) * (v[i] - mean);
    return my_sqrt(ss / (n - 1)) / mean;
}

typedef struct {
    double median, cv;
    int used, discarded, fallback;
} stat_t;

static stat_t summarize(const double *v, const unsigned char *dist, int n, int min_clean)
{
    stat_t st;
    double *clean = xcalloc((size_t)n, sizeof(double));
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!dist[i])
            clean[k++] = v[i];
    if (k >= min_clean) {
        st.median = median(clean, k);
        st.cv = coeff_var(clean, k);
        st.used = k;
        st.discarded = n - k;
        st.fallback = 0;
    } else {
        st.median = median(v, n);
        st.cv = coeff_var(v, n);
        st.used = n;
        st.discarded = 0;
        st.fallback = k < n;
    }
    free(clean);
    return st;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint64_t rng_next(void)
{
    /* xorshift64* */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

/* ------------------------------------------------------------------------------------------ */
/* files under the sysroot                                                                     */

static char g_sysroot[2048] = ""; /* "" = the real root */

static void sys_path(char *out, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void sys_path(char *out, size_t size, const char *fmt, ...)
{
    va_list ap;
    int n = snprintf(out, size, "%s", g_sysroot);
    if (n < 0 || (size_t)n >= size)
        die(2, "path too long");
    va_start(ap, fmt);
    n = vsnprintf(out + n, size - (size_t)n, fmt, ap);
    va_end(ap);
    if (n < 0)
        die(2, "path too long");
}

/* Read a whole small file. Returns 0, or -1 if it does not exist and !required.
 * A required file that is missing, or any unreadable file, is a fatal error naming the file. */
static int read_text(const char *path, char *buf, size_t size, int required)
{
    FILE *f = fopen(path, "r");
    size_t n;
    if (!f) {
        if (!required && (errno == ENOENT || errno == ENOTDIR))
            return -1;
        die(2, "cannot read %s: %s", path, strerror(errno));
    }
    n = fread(buf, 1, size - 1, f);
    if (ferror(f)) {
        fclose(f);
        die(2, "cannot read %s: read error", path);
    }
    if (n == size - 1 && fgetc(f) != EOF) {
        fclose(f);
        die(2, "%s: malformed: file larger than %zu bytes", path, size - 1);
    }
    fclose(f);
    buf[n] = '\0';
    return 0;
}

/* bounded copy that always terminates (truncates silently) */
static void scopy(char *dst, size_t size, const char *src)
{
    size_t n = strlen(src);
    if (n >= size)
        n = size - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static void strip(char *s)
{
    size_t n = strlen(s);
    char *p = s;
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    while (*p && isspace((unsigned char)*p))
        p++;
    if (p != s)
        memmove(s, p, strlen(p) + 1);
}

/* a short printable excerpt of file content for error messages */
static const char *excerpt(const char *s)
{
    static char out[48];
    size_t i;
    for (i = 0; i < sizeof(out) - 1 && s[i]; i++)
        out[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
    out[i] = '\0';
    while (i > 0 && (isspace((unsigned char)s[i - 1]) || !isprint((unsigned char)s[i - 1])))
        out[--i] = '\0';
    return out;
}

/* parse a non-negative decimal integer; returns 0 on success */
static int parse_uint(const char *s, char **end, long long *out)
{
    long long v = 0;
    const char *p = s;
    if (!isdigit((unsigned char)*p))
        return -1;
    while (isdigit((unsigned char)*p)) {
        v = v * 10 + (*p - '0');
        if (v > (1LL << 53))
            return -1;
        p++;
    }
    *out = v;
    *end = (char *)p;
    return 0;
}

/* "0-3,8,10-11" -> ids (sorted, unique). Empty text = empty list. Dies naming the file. */
static int parse_list(const char *path, const char *text, int *ids, int max_id)
{
    char buf[8192];
    char *p;
    int n = 0, i;
    unsigned char seen[MAX_CPUS];
    memset(seen, 0, sizeof(seen));
    if (max_id > MAX_CPUS)
        max_id = MAX_CPUS;
    scopy(buf, sizeof(buf), text);
    strip(buf);
    p = buf;
    while (*p) {
        long long a, b;
        char *end;
        if (parse_uint(p, &end, &a) != 0)
            die(2, "%s: malformed list '%s' (expected e.g. 0-3,8)", path, excerpt(text));
        b = a;
        p = end;
        if (*p == '-') {
            if (parse_uint(p + 1, &end, &b) != 0 || b < a)
                die(2, "%s: malformed list '%s' (expected e.g. 0-3,8)", path, excerpt(text));
            p = end;
        }
        if (b >= max_id)
            die(2, "%s: id %lld out of range (max %d)", path, b, max_id - 1);
        for (long long k = a; k <= b; k++)
            seen[k] = 1;
        if (*p == ',')
            p++;
        else if (*p)
            die(2, "%s: malformed list '%s' (expected e.g. 0-3,8)", path, excerpt(text));
    }
    for (i = 0; i < max_id; i++)
        if (seen[i])
            ids[n++] = i;
    return n;
}

static long long read_int_file(const char *path, int required, long long dflt, int allow_neg)
{
    char buf[128];
    char *end;
    long long v;
    int neg = 0;
    const char *p;
    if (read_text(path, buf, sizeof(buf), required) != 0)
        return dflt;
    strip(buf);
    p = buf;
    if (allow_neg && *p == '-') {
        neg = 1;
        p++;
    }
    if (parse_uint(p, &end, &v) != 0 || *end != '\0')
        die(2, "%s: malformed: expected an integer, got '%s'", path, excerpt(buf));
    return neg ? -v : v;
}

/* ------------------------------------------------------------------------------------------ */
/* topology                                                                                    */

typedef struct {
    int id;
    int ncpus;
    int *cpus;
    char cpulist[1024];
    long long mem_total_kb;
    long long mem_free_kb;
    long long hp2m_free; /* per-node free 2 MiB huge pages, -1 unknown */
    int nsockets;
    int sockets[MAX_NODES];
} node_t;

typedef struct {
    int nnodes;
    node_t nodes[MAX_NODES];
    int dist[MAX_NODES][MAX_NODES];
    int ncpus;
    int cpu_ids[MAX_CPUS];
    int cpu_pkg[MAX_CPUS];  /* indexed by cpu id */
    int cpu_core[MAX_CPUS]; /* indexed by cpu id, -1 unknown */
    int cpu_node[MAX_CPUS]; /* indexed by cpu id: node index */
    int nsockets;
    int socket_ids[MAX_CPUS];
    long long llc_bytes; /* -1 unknown */
    int llc_level;
    char thp[32]; /* always | madvise | never | unavailable */
    long long hp2m_total, hp2m_free, hp1g_total, hp1g_free; /* -1 unknown */
    char hostname[256], boot_id[64], kernel[256], cpu_model[256];
    int have_hostname, have_boot_id, have_kernel, have_cpu_model;
    int virtualized; /* -1 unknown */
} topo_t;

static topo_t T;

static long long parse_size_suffix(const char *path, const char *text)
{
    char buf[64];
    char *end;
    long long v;
    scopy(buf, sizeof(buf), text);
    strip(buf);
    if (parse_uint(buf, &end, &v) != 0)
        die(2, "%s: malformed size '%s' (expected e.g. 32768K)", path, excerpt(text));
    if (*end == 'K' || *end == 'k')
        v *= 1024, end++;
    else if (*end == 'M')
        v *= 1024 * 1024, end++;
    else if (*end == 'G')
        v *= 1024LL * 1024 * 1024, end++;
    if (*end != '\0')
        die(2, "%s: malformed size '%s' (expected e.g. 32768K)", path, excerpt(text));
    return v;
}

static void read_meminfo(node_t *nd)
{
    char path[4096], text[16384];
    char *line, *save = NULL;
    int got_total = 0, got_free = 0;
    sys_path(path, sizeof(path), "/sys/devices/system/node/node%d/meminfo", nd->id);
    read_text(path, text, sizeof(text), 1);
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int id;
        char key[64];
        long long val;
        if (sscanf(line, "Node %d %63[^:]: %lld", &id, key, &val) != 3)
            continue;
        if (id != nd->id)
            die(2, "%s: malformed: line for node %d in the file of node %d", path, id, nd->id);
        if (strcmp(key, "MemTotal") == 0)
            nd->mem_total_kb = val, got_total = 1;
        else if (strcmp(key, "MemFree") == 0)
            nd->mem_free_kb = val, got_free = 1;
    }
    if (!got_total || !got_free)
        die(2, "%s: malformed: no 'Node %d MemTotal:' and 'Node %d MemFree:' lines", path, nd->id,
            nd->id);
}

static void read_llc(void)
{
    char path[4096], text[256];
    int cpu = T.ncpus ? T.cpu_ids[0] : 0;
    T.llc_bytes = -1;
    T.llc_level = 0;
    for (int idx = 0; idx < 16; idx++) {
        long long level;
        sys_path(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d/level", cpu, idx);
        level = read_int_file(path, 0, -1, 0);
        if (level < 0)
            continue; /* fake trees may hold index3 only */
        sys_path(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d/type", cpu, idx);
        if (read_text(path, text, sizeof(text), 1) != 0)
            continue;
        strip(text);
        if (strcmp(text, "Unified") != 0 && strcmp(text, "Data") != 0)
            continue;
        if (level >= T.llc_level) {
            sys_path(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/cache/index%d/size", cpu,
                     idx);
            read_text(path, text, sizeof(text), 1);
            T.llc_bytes = parse_size_suffix(path, text);
            T.llc_level = (int)level;
        }
    }
}

static void read_identity(void)
{
    char path[4096];
    sys_path(path, sizeof(path), "/proc/sys/kernel/hostname");
    if (read_text(path, T.hostname, sizeof(T.hostname), 0) == 0) {
        strip(T.hostname);
        T.have_hostname = 1;
    }
    sys_path(path, sizeof(path), "/proc/sys/kernel/random/boot_id");
    if (read_text(path, T.boot_id, sizeof(T.boot_id), 0) == 0) {
        strip(T.boot_id);
        T.have_boot_id = 1;
    }
    sys_path(path, sizeof(path), "/proc/sys/kernel/osrelease");
    if (read_text(path, T.kernel, sizeof(T.kernel), 0) == 0) {
        strip(T.kernel);
        T.have_kernel = 1;
    }
    T.virtualized = -1;
    sys_path(path, sizeof(path), "/proc/cpuinfo");
    {
        FILE *f = fopen(path, "r");
        if (f) {
            char line[8192];
            int flags_seen = 0;
            while (fgets(line, sizeof(line), f)) {
                char *colon = strchr(line, ':');
                if (!colon)
                    continue;
                if (!T.have_cpu_model && strncmp(line, "model name", 10) == 0) {
                    snprintf(T.cpu_model, sizeof(T.cpu_model), "%s", colon + 1);
                    strip(T.cpu_model);
                    T.have_cpu_model = 1;
                } else if (!flags_seen && strncmp(line, "flags", 5) == 0) {
                    char *p = colon + 1;
                    flags_seen = 1;
                    T.virtualized = 0;
                    for (char *tok = strtok(p, " \t\n"); tok; tok = strtok(NULL, " \t\n"))
                        if (strcmp(tok, "hypervisor") == 0)
                            T.virtualized = 1;
                }
            }
            fclose(f);
        }
    }
}

static void read_hugepages(void)
{
    char path[4096], text[256];
    sys_path(path, sizeof(path), "/sys/kernel/mm/transparent_hugepage/enabled");
    if (read_text(path, text, sizeof(text), 0) != 0) {
        snprintf(T.thp, sizeof(T.thp), "unavailable");
    } else {
        char *a = strchr(text, '['), *b = a ? strchr(a, ']') : NULL;
        if (!a || !b || b - a - 1 <= 0 || b - a - 1 >= (long)sizeof(T.thp))
            die(2, "%s: malformed: expected e.g. 'always [madvise] never', got '%s'", path,
                excerpt(text));
        memcpy(T.thp, a + 1, (size_t)(b - a - 1));
        T.thp[b - a - 1] = '\0';
    }
    sys_path(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
    T.hp2m_total = read_int_file(path, 0, -1, 0);
    sys_path(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
    T.hp2m_free = read_int_file(path, 0, -1, 0);
    sys_path(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages");
    T.hp1g_total = read_int_file(path, 0, -1, 0);
    sys_path(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages");
    T.hp1g_free = read_int_file(path, 0, -1, 0);
}

static void read_topology(void)
{
    char path[4096], text[16384];
    int ids[MAX_NODES];
    int *cpus = xcalloc(MAX_CPUS, sizeof(int));
    int n, i, j;

    for (i = 0; i < MAX_CPUS; i++)
        T.cpu_pkg[i] = T.cpu_core[i] = T.cpu_node[i] = -1;

    sys_path(path, sizeof(path), "/sys/devices/system/node/online");
    read_text(path, text, sizeof(text), 1);
    n = parse_list(path, text, ids, MAX_NODES);
    if (n == 0)
        die(2, "%s: malformed: no online node", path);
    T.nnodes = n;
    for (i = 0; i < n; i++) {
        node_t *nd = &T.nodes[i];
        nd->id = ids[i];
        nd->hp2m_free = -1;
        sys_path(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", nd->id);
        read_text(path, text, sizeof(text), 1);
        nd->ncpus = parse_list(path, text, cpus, MAX_CPUS);
        nd->cpus = xcalloc((size_t)nd->ncpus, sizeof(int));
        memcpy(nd->cpus, cpus, (size_t)nd->ncpus * sizeof(int));
        strip(text);
        scopy(nd->cpulist, sizeof(nd->cpulist), text);
        for (j = 0; j < nd->ncpus; j++) {
            int c = nd->cpus[j];
            if (T.cpu_node[c] >= 0)
                die(2, "%s: cpu %d is also listed by node %d", path, c,
                    T.nodes[T.cpu_node[c]].id);
            T.cpu_node[c] = i;
        }
        read_meminfo(nd);
        sys_path(path, sizeof(path),
                 "/sys/devices/system/node/node%d/hugepages/hugepages-2048kB/free_hugepages",
                 nd->id);
        nd->hp2m_free = read_int_file(path, 0, -1, 0);
    }
    /* SLIT distances: node%d/distance lists one value per online node, in node order */
    for (i = 0; i < n; i++) {
        char *p, *end;
        long long v;
        sys_path(path, sizeof(path), "/sys/devices/system/node/node%d/distance", T.nodes[i].id);
        read_text(path, text, sizeof(text), 1);
        p = text;
        for (j = 0; j < n; j++) {
            while (*p == ' ' || *p == '\t')
                p++;
            if (parse_uint(p, &end, &v) != 0 || v < 1 || v > 255)
                die(2, "%s: malformed: expected %d distances (integers 1-255), got '%s'", path, n,
                    excerpt(text));
            T.dist[i][j] = (int)v;
            p = end;
        }
        while (isspace((unsigned char)*p))
            p++;
        if (*p)
            die(2, "%s: malformed: expected %d distances, got more: '%s'", path, n,
                excerpt(text));
        if (T.dist[i][i] != 10)
            die(2, "%s: malformed: local distance is %d, expected 10", path, T.dist[i][i]);
    }
    /* CPUs in id order, with their package (socket) */
    T.ncpus = 0;
    for (i = 0; i < MAX_CPUS; i++) {
        if (T.cpu_node[i] < 0)
            continue;
        T.cpu_ids[T.ncpus++] = i;
        sys_path(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 i);
        T.cpu_pkg[i] = (int)read_int_file(path, 1, 0, 1);
        if (T.cpu_pkg[i] < 0)
            T.cpu_pkg[i] = 0; /* some hypervisors report -1: one package */
        sys_path(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/topology/core_id", i);
        T.cpu_core[i] = (int)read_int_file(path, 0, -1, 1);
    }
    if (T.ncpus == 0) {
        sys_path(path, sizeof(path), "/sys/devices/system/node/node%d/cpulist", T.nodes[0].id);
        die(2, "%s: malformed: no node lists any CPU", path);
    }
    /* sockets = distinct package ids; per node, the sockets of its CPUs */
    T.nsockets = 0;
    for (i = 0; i < T.ncpus; i++) {
        int pkg = T.cpu_pkg[T.cpu_ids[i]], found = 0;
        for (j = 0; j < T.nsockets; j++)
            found |= T.socket_ids[j] == pkg;
        if (!found)
            T.socket_ids[T.nsockets++] = pkg;
    }
    qsort(T.socket_ids, (size_t)T.nsockets, sizeof(int), cmp_int);
    for (i = 0; i < n; i++) {
        node_t *nd = &T.nodes[i];
        nd->nsockets = 0;
        for (j = 0; j < nd->ncpus; j++) {
            int pkg = T.cpu_pkg[nd->cpus[j]], found = 0;
            for (int k = 0; k < nd->nsockets; k++)
                found |= nd->sockets[k] == pkg;
            if (!found && nd->nsockets < MAX_NODES)
                nd->sockets[nd->nsockets++] = pkg;
        }
        qsort(nd->sockets, (size_t)nd->nsockets, sizeof(int), cmp_int);
    }
    free(cpus);
    read_llc();
    read_hugepages();
    read_identity();
}

/* ------------------------------------------------------------------------------------------ */
/* results                                                                                     */

#define MAX_WARN 32

typedef struct {
    int present;
    int a, b; /* cpu ids */
    double median, cv;
    int reps, discarded, unreliable;
    long long trips_per_rep;
} c2c_t;

typedef struct {
    int measured;
    int budget_ms;
    double cv_limit;
    double duration_ms;
    size_t buffer_bytes, planned_bytes;
    const char *buffer_reason;
    char warnings[MAX_WARN][320];
    int nwarn;
    int row_cpu[MAX_NODES]; /* cpu the chase of CPU node i runs on, -1 none */
    int valid[MAX_NODES][MAX_NODES];
    double lat[MAX_NODES][MAX_NODES], cv[MAX_NODES][MAX_NODES];
    int reps[MAX_NODES][MAX_NODES];
    int discarded_matrix, matrix_unreliable;
    const char *page_kind;
    size_t page_size;
    double huge_fraction; /* -1 unknown */
    const char *placement;
    int placement_verified; /* -1 unknown, 0 wrong node seen, 1 all samples on the bound node */
    long long steps_per_rep;
    c2c_t within, across;
    int setup_failed;
    double setup_ms; /* mapping, binding and building the chains */
    double matrix_ms, c2c_ms, teardown_ms;
} result_t;

static result_t R;

static void warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void warn(const char *fmt, ...)
{
    va_list ap;
    if (R.nwarn >= MAX_WARN)
        return;
    va_start(ap, fmt);
    vsnprintf(R.warnings[R.nwarn++], sizeof(R.warnings[0]), fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------------------------ */
/* CPU affinity and memory policy through syscalls                                             */

#define MASK_WORDS (MAX_CPUS / (8 * (int)sizeof(unsigned long)))
static unsigned long g_allowed[MASK_WORDS];
static int g_model; /* 1 under --sysroot */

static int cpu_allowed(int cpu)
{
    if (g_model)
        return 1;
    return (g_allowed[cpu / (8 * (int)sizeof(unsigned long))] >>
            (cpu % (8 * (int)sizeof(unsigned long)))) & 1UL;
}

static int pin_cpu(int cpu)
{
    unsigned long mask[MASK_WORDS];
    memset(mask, 0, sizeof(mask));
    mask[cpu / (8 * (int)sizeof(unsigned long))] |= 1UL << (cpu % (8 * (int)sizeof(unsigned long)));
    return (int)syscall(SYS_sched_setaffinity, 0, sizeof(mask), mask);
}

static void node_mask(int node_id, unsigned long *mask, size_t words)
{
    memset(mask, 0, words * sizeof(unsigned long));
    mask[node_id / (8 * (int)sizeof(unsigned long))] |=
        1UL << (node_id % (8 * (int)sizeof(unsigned long)));
}

static int first_allowed_cpu(const node_t *nd)
{
    for (int j = 0; j < nd->ncpus; j++)
        if (cpu_allowed(nd->cpus[j]))
            return nd->cpus[j];
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* buffer choice                                                                               */

static void plan_buffer(long long override_mib)
{
    unsigned long long llc = T.llc_bytes > 0 ? (unsigned long long)T.llc_bytes : DEFAULT_LLC;
    unsigned long long want, min_free = 0;
    int have_mem = 0;
    for (int i = 0; i < T.nnodes; i++) {
        unsigned long long f = (unsigned long long)T.nodes[i].mem_free_kb * 1024ULL;
        if (T.nodes[i].mem_total_kb <= 0)
            continue;
        if (!have_mem || f < min_free)
            min_free = f;
        have_mem = 1;
    }
    if (!have_mem) {
        char path[4096];
        sys_path(path, sizeof(path), "/sys/devices/system/node/node%d/meminfo", T.nodes[0].id);
        die(2, "%s: malformed: no node has memory (MemTotal 0 everywhere)", path);
    }
    if (T.llc_bytes <= 0)
        warn("LLC size unknown (no cpu/cpuN/cache/index*/size): assumed 32 MiB");
    if (override_mib > 0) {
        want = (unsigned long long)override_mib * MIB;
        R.buffer_reason = "--buffer-mib";
        if (want > min_free / 2)
            warn("--buffer-mib %lld exceeds half the free memory of the smallest node",
                 override_mib);
    } else {
        want = llc * BUF_LLC_FACTOR;
        R.buffer_reason = "8x LLC";
        if (want < BUF_FLOOR) {
            want = BUF_FLOOR;
            R.buffer_reason = "floor 64 MiB";
        }
        if (want > BUF_CAP) {
            want = BUF_CAP;
            R.buffer_reason = "cap 1 GiB";
        }
        if (want > min_free / 4) {
            want = min_free / 4;
            R.buffer_reason = "1/4 of the free memory of the smallest node";
        }
        if (want < BUF_ABS_MIN) {
            if (min_free / 2 >= BUF_ABS_MIN) {
                want = BUF_ABS_MIN;
                R.buffer_reason = "minimum 16 MiB";
            } else {
                want = min_free / 2;
                R.buffer_reason = "1/2 of the free memory of the smallest node";
                warn("very little free memory (%llu MiB on the smallest node)", min_free / MIB);
            }
        }
    }
    want -= want % HUGE_2M;
    if (want < HUGE_2M)
        want = HUGE_2M;
    R.buffer_bytes = R.planned_bytes = (size_t)want;
    if (want < 2 * llc)
        warn("buffer is only %.1fx the LLC: part of the chase hits in cache", (double)want / llc);
}

/* ------------------------------------------------------------------------------------------ */
/* pointer chase                                                                               */

typedef struct {
    char *base;
    size_t len;
    void *map;
    size_t map_len;
    void **cursor;
    const char *kind; /* hugetlb | thp | base */
    double huge_fraction;
    const char *placement;
    int placement_verified;
} mbuf_t;

static mbuf_t B[MAX_NODES];
static void **volatile g_sink;

static void **__attribute__((noinline)) chase(void **p, long long steps)
{
    while (steps >= 8) {
        p = (void **)*p;
        p = (void **)*p;
        p = (void **)*p;
        p = (void **)*p;
        p = (void **)*p;
        p = (void **)*p;
        p = (void **)*p;
        p = (void **)*p;
        steps -= 8;
    }
    while (steps-- > 0)
        p = (void **)*p;
    return p;
}

static int g_disturbed; /* set by time_chase */

static double time_chase(mbuf_t *b, long long steps)
{
    double t0 = now_ns(), c0 = cpu_ns(CLOCK_THREAD_CPUTIME_ID), c1, t1;
    b->cursor = chase(b->cursor, steps);
    c1 = cpu_ns(CLOCK_THREAD_CPUTIME_ID);
    t1 = now_ns();
    g_sink = b->cursor;
    g_disturbed = disturbed(t1 - t0, c0 >= 0 && c1 >= 0 ? c1 - c0 : -1.0);
    return (t1 - t0) / (double)steps;
}

/* fraction of [base, base+len) backed by transparent huge pages, from /proc/self/smaps */
static double thp_fraction(const char *base, size_t len)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    unsigned long start = (unsigned long)base, end = start + len;
    int inside = 0;
    unsigned long long huge_kb = 0;
    if (!f)
        return -1.0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long a, b;
        unsigned long long kb;
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            inside = a < end && b > start;
        } else if (inside && sscanf(line, "AnonHugePages: %llu kB", &kb) == 1) {
            huge_kb += kb;
        }
    }
    fclose(f);
    return (double)(huge_kb * 1024ULL) / (double)len;
}

/* map a buffer for memory node index m, bind it there and build the random cycle in it, which
 * faults it in; stop early (shorter buffer) at touch_deadline */
static void alloc_buffer(int m, size_t bytes, double touch_deadline)
{
    node_t *nd = &T.nodes[m];
    mbuf_t *b = &B[m];
    unsigned long mask[2];
    int cpu = first_allowed_cpu(nd), policy_set = 0;
    size_t n = bytes / LINE, i;

    if (cpu >= 0)
        pin_cpu(cpu);
    b->len = bytes;
    b->kind = "base";
    b->huge_fraction = 0.0;
    if (nd->hp2m_free > 0 && (size_t)nd->hp2m_free * HUGE_2M >= bytes) {
        b->map = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_HUGE_2MB, -1, 0);
        if (b->map != MAP_FAILED) {
            b->map_len = bytes;
            b->base = b->map;
            b->kind = "hugetlb";
            b->huge_fraction = 1.0;
        }
    }
    if (strcmp(b->kind, "hugetlb") != 0) {
        b->map_len = bytes + HUGE_2M;
        b->map = mmap(NULL, b->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (b->map == MAP_FAILED)
            die(3, "cannot map %zu MiB for node %d: %s", bytes / MIB, nd->id, strerror(errno));
        b->base = (char *)(((uintptr_t)b->map + HUGE_2M - 1) & ~(uintptr_t)(HUGE_2M - 1));
        if (strcmp(T.thp, "always") == 0 || strcmp(T.thp, "madvise") == 0) {
            if (madvise(b->base, bytes, MADV_HUGEPAGE) == 0)
                b->kind = "thp";
        }
    }
    node_mask(nd->id, mask, 2);
    if (syscall(SYS_mbind, b->base, bytes, MPOL_BIND, mask, (unsigned long)(2 * 64),
                MPOL_MF_STRICT | MPOL_MF_MOVE) == 0) {
        b->placement = "mbind";
    } else {
        int err = errno;
        if (syscall(SYS_set_mempolicy, MPOL_BIND, mask, (unsigned long)(2 * 64)) == 0) {
            b->placement = "set_mempolicy";
            policy_set = 1;
            warn("mbind failed for node %d (%s): bound with set_mempolicy", nd->id, strerror(err));
        } else {
            b->placement = "first-touch";
            warn("mbind and set_mempolicy failed for node %d (%s): first-touch placement", nd->id,
                 strerror(err));
        }
    }
    /* A random cyclic permutation of the cache lines, grown by insertion: line k goes into the
     * cycle right after a uniformly chosen line j < k (this gives every single-cycle order of
     * the lines 0..k with the same probability, as Sattolo's algorithm does). The cycle is
     * valid after every step, so the loop can stop at any 2 MiB boundary: it faults the buffer
     * in as it goes, and a host whose memory faults in slowly (a fresh VM page can cost a host
     * page fault) or that gives us little CPU gets a shorter buffer, not a blown budget. */
    {
        char **line0 = (char **)(void *)b->base;
        size_t lines_per_huge = HUGE_2M / LINE;
        *line0 = b->base; /* a cycle of one line */
        for (i = 1; i < n; i++) {
            size_t j = (size_t)(((rng_next() >> 32) * (uint64_t)i) >> 32);
            char **lj = (char **)(void *)(b->base + j * LINE);
            char **li = (char **)(void *)(b->base + i * LINE);
            *li = *lj;
            *lj = (char *)li;
            if ((i + 1) % lines_per_huge == 0 && i + 1 < n && (i + 1) * LINE >= BUF_ABS_MIN &&
                now_ns() > touch_deadline) {
                warn("node %d buffer cut to %zu MiB (of %zu) to fit the budget: memory faults "
                     "in slowly here or the CPU is busy",
                     nd->id, (i + 1) * LINE / MIB, bytes / MIB);
                bytes = (i + 1) * LINE;
                b->len = bytes;
                n = i + 1;
                break;
            }
        }
    }
    if (policy_set)
        syscall(SYS_set_mempolicy, MPOL_DEFAULT, NULL, 0UL);
    b->cursor = (void **)(void *)b->base;
    if (strcmp(b->kind, "thp") == 0) {
        b->huge_fraction = thp_fraction(b->base, bytes);
        if (b->huge_fraction >= 0 && b->huge_fraction < 0.9)
            warn("only %.0f%% of the node %d buffer is on transparent huge pages",
                 100.0 * b->huge_fraction, nd->id);
    }
    /* placement check: sample pages with get_mempolicy(MPOL_F_NODE|MPOL_F_ADDR) */
    b->placement_verified = 1;
    for (i = 0; i < 64; i++) {
        int got = -1;
        char *addr = b->base + (bytes / 64) * i;
        if (syscall(SYS_get_mempolicy, &got, NULL, 0UL, addr, MPOL_F_NODE | MPOL_F_ADDR) != 0) {
            b->placement_verified = -1;
            warn("get_mempolicy failed (%s): placement on node %d unverified", strerror(errno),
                 nd->id);
            break;
        }
        if (got != nd->id) {
            b->placement_verified = 0;
            warn("buffer of node %d has a page on node %d", nd->id, got);
            break;
        }
    }
}

static void free_buffers(void)
{
    for (int m = 0; m < T.nnodes; m++)
        if (B[m].map && B[m].map != MAP_FAILED)
            munmap(B[m].map, B[m].map_len);
}

/* ------------------------------------------------------------------------------------------ */
/* core-to-core ping-pong                                                                      */

typedef struct {
    _Alignas(64) atomic_ullong line;
    _Alignas(64) atomic_int stop;
    atomic_int ready;
    int cpu;
    int pin_ok;
} pingpong_t;

static pingpong_t PP;

/* A waiter that has spun relax_mask + 1 times without the line changing hints the CPU (x86
 * PAUSE, arm64 YIELD). On real hardware a handoff takes far fewer than 1,024 spins, so the
 * measured latencies do not include the hint. An emulator that runs all vCPUs on one host thread
 * (QEMU TCG, thread=single) switches to the next vCPU at the hint, so the peer gets to answer;
 * there every spin is emulated, and on a loaded host 1,024 of them per handoff left no round
 * trip within the budget, so a virtual machine (whose timings are advisory) hints every 16. */
static unsigned int relax_mask = 0x3FFu;

static inline void spin_relax(unsigned int spins)
{
    if ((spins & relax_mask) != 0)
        return;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void *pong(void *arg)
{
    pingpong_t *s = arg;
    unsigned long long expect = 1;
    s->pin_ok = pin_cpu(s->cpu) == 0;
    atomic_store(&s->ready, 1);
    for (;;) {
        unsigned int spins = 0;
        while (atomic_load_explicit(&s->line, memory_order_acquire) != expect) {
            if (atomic_load_explicit(&s->stop, memory_order_relaxed))
                return NULL;
            spin_relax(++spins);
        }
        atomic_store_explicit(&s->line, expect + 1, memory_order_release);
        expect += 2;
    }
}

/* trips round trips; returns seconds-free elapsed ns, or -1 if the peer stopped answering */
static double ping(unsigned long long *seq, long long trips, double give_up)
{
    double t0 = now_ns();
    for (long long k = 0; k < trips; k++) {
        unsigned long long odd = *seq + 1;
        unsigned int spins = 0;
        atomic_store_explicit(&PP.line, odd, memory_order_release);
        while (atomic_load_explicit(&PP.line, memory_order_acquire) != odd + 1) {
            if ((++spins & 0xFFFu) == 0 && now_ns() > give_up)
                return -1.0;
            spin_relax(spins);
        }
        *seq = odd + 1;
        if ((k & 63) == 63 && now_ns() > give_up) /* many slow trips add up too */
            return -1.0;
    }
    return now_ns() - t0;
}

static void measure_c2c(c2c_t *c, double pair_deadline)
{
    pthread_t th;
    unsigned long long seq = 0;
    double est, rep_ns, *vals, t_wait;
    unsigned char *dist;
    clockid_t peer_clock;
    int have_peer_clock;
    long long trips;
    int reps = 0, err;
    stat_t st;

    atomic_store(&PP.line, 0);
    atomic_store(&PP.stop, 0);
    atomic_store(&PP.ready, 0);
    PP.cpu = c->b;
    PP.pin_ok = 0;
    if (pin_cpu(c->a) != 0) {
        warn("c2c: cannot pin to cpu %d: %s", c->a, strerror(errno));
        c->present = 0;
        return;
    }
    err = pthread_create(&th, NULL, pong, &PP);
    if (err != 0) {
        warn("c2c: cannot start a thread: %s", strerror(err));
        c->present = 0;
        return;
    }
    t_wait = now_ns() + 2e9;
    if (t_wait > pair_deadline)
        t_wait = pair_deadline;
    while (!atomic_load(&PP.ready) && now_ns() < t_wait)
        sched_yield();
    if (!atomic_load(&PP.ready) || !PP.pin_ok) {
        atomic_store(&PP.stop, 1);
        pthread_join(th, NULL);
        warn("c2c: cannot pin the peer thread to cpu %d", c->b);
        c->present = 0;
        return;
    }
    if (ping(&seq, 100, pair_deadline) < 0 || (est = ping(&seq, 400, pair_deadline)) < 0) {
        atomic_store(&PP.stop, 1);
        pthread_join(th, NULL);
        warn("c2c: cpus %d and %d could not exchange a cache line within the budget (CPU "
             "contention?)", c->a, c->b);
        c->present = 0;
        c->unreliable = 1;
        return;
    }
    est /= 400.0;
    if (est <= 0)
        est = 1.0;
    have_peer_clock = pthread_getcpuclockid(th, &peer_clock) == 0;
    rep_ns = (pair_deadline - now_ns()) / 30.0;
    if (rep_ns > 1e6)
        rep_ns = 1e6;
    if (rep_ns < 0.2e6)
        rep_ns = 0.2e6;
    trips = (long long)(rep_ns / est);
    if (trips < 100)
        trips = 100;
    c->trips_per_rep = trips;
    vals = xcalloc(MAX_REPS, sizeof(double));
    dist = xcalloc(MAX_REPS, 1);
    while (reps < MAX_REPS) {
        double dt, last = trips * est, c0, c1, p0, p1;
        if (reps >= MIN_REPS && now_ns() + last > pair_deadline)
            break;
        c0 = cpu_ns(CLOCK_THREAD_CPUTIME_ID);
        p0 = have_peer_clock ? cpu_ns(peer_clock) : -1.0;
        /* a rep that runs past the pair's time (the peer keeps losing its CPU) is abandoned */
        dt = ping(&seq, trips, pair_deadline + 0.2 * rep_ns);
        c1 = cpu_ns(CLOCK_THREAD_CPUTIME_ID);
        p1 = have_peer_clock ? cpu_ns(peer_clock) : -1.0;
        if (dt < 0) {
            if (reps < MIN_REPS) {
                warn("c2c: cpus %d-%d: only %d repetitions fit in the budget", c->a, c->b, reps);
                c->unreliable = 1;
            }
            break;
        }
        /* either thread off its CPU makes the other wait: both must have run all along */
        dist[reps] = disturbed(dt, c0 >= 0 && c1 >= 0 ? c1 - c0 : -1.0) ||
                     disturbed(dt, p0 >= 0 && p1 >= 0 ? p1 - p0 : -1.0);
        vals[reps] = dt / (2.0 * (double)trips); /* one way = half a round trip */
        if (!dist[reps]) {                        /* the rep length follows the clean reps */
            est = dt / (double)trips;
            trips = (long long)(rep_ns / est);
            if (trips < 100)
                trips = 100;
            if (trips > c->trips_per_rep)
                c->trips_per_rep = trips;
        }
        reps++;
    }
    atomic_store(&PP.stop, 1);
    pthread_join(th, NULL);
    c->present = reps > 0;
    if (reps == 0)
        c->unreliable = 1;
    if (reps > 0) {
        st = summarize(vals, dist, reps, MIN_REPS);
        c->median = st.median;
        c->cv = st.cv;
        c->reps = st.used;
        c->discarded = st.discarded;
        if (st.fallback) {
            c->unreliable = 1;
            warn("c2c: cpus %d-%d: fewer than %d undisturbed repetitions (a thread was off its "
                 "CPU): value unreliable",
                 c->a, c->b, MIN_REPS);
        }
    }
    free(vals);
    free(dist);
}

/* pick the pairs: two different cores of the first socket; first CPUs of the first two sockets */
static void choose_pairs(void)
{
    int s0 = T.socket_ids[0];
    int a = -1, b = -1, sibling = -1;
    memset(&R.within, 0, sizeof(R.within));
    memset(&R.across, 0, sizeof(R.across));
    for (int i = 0; i < T.ncpus; i++) {
        int c = T.cpu_ids[i];
        if (T.cpu_pkg[c] != s0 || !cpu_allowed(c))
            continue;
        if (a < 0) {
            a = c;
        } else if (b < 0) {
            if (T.cpu_core[c] < 0 || T.cpu_core[c] != T.cpu_core[a])
                b = c;
            else if (sibling < 0)
                sibling = c;
        }
    }
    if (b < 0)
        b = sibling;
    if (a >= 0 && b >= 0) {
        R.within.present = 1;
        R.within.a = a;
        R.within.b = b;
    }
    if (T.nsockets >= 2) {
        int x = -1, y = -1;
        for (int i = 0; i < T.ncpus; i++) {
            int c = T.cpu_ids[i];
            if (!cpu_allowed(c))
                continue;
            if (x < 0 && T.cpu_pkg[c] == T.socket_ids[0])
                x = c;
            if (y < 0 && T.cpu_pkg[c] == T.socket_ids[1])
                y = c;
        }
        if (x >= 0 && y >= 0) {
            R.across.present = 1;
            R.across.a = x;
            R.across.b = y;
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* the two modes                                                                               */

static void run_model(void)
{
    R.measured = 0;
    R.page_kind = strcmp(T.thp, "always") == 0 || strcmp(T.thp, "madvise") == 0 ? "thp" : "base";
    for (int i = 0; i < T.nnodes; i++)
        if (T.nodes[i].hp2m_free > 0 &&
            (size_t)T.nodes[i].hp2m_free * HUGE_2M >= R.buffer_bytes)
            R.page_kind = "hugetlb";
    R.page_size = strcmp(R.page_kind, "base") == 0 ? 4096 : HUGE_2M;
    R.huge_fraction = -1.0;
    R.placement = "none";
    R.placement_verified = -1;
    for (int i = 0; i < T.nnodes; i++) {
        R.row_cpu[i] = T.nodes[i].ncpus ? T.nodes[i].cpus[0] : -1;
        for (int j = 0; j < T.nnodes; j++) {
            if (R.row_cpu[i] < 0 || T.nodes[j].mem_total_kb <= 0)
                continue;
            R.valid[i][j] = 1;
            R.lat[i][j] = MODEL_LOCAL_NS * T.dist[i][j] / 10.0;
        }
    }
    if (R.within.present) {
        R.within.median = MODEL_C2C_SOCKET_NS;
    }
    if (R.across.present) {
        R.across.median = MODEL_C2C_CROSS_NS;
    }
}

static void run_measure(double deadline)
{
    int cells_i[MAX_NODES * MAX_NODES], cells_j[MAX_NODES * MAX_NODES], ncells = 0;
    double est[MAX_NODES * MAX_NODES], *vals, mean_est = 0.0, remaining, matrix_time, rep_ns;
    double matrix_deadline, last_round = 0.0, reserve;
    int npairs = R.within.present + R.across.present, rounds = 0, cur_cpu = -1;
    long long steps, clean_n = 0;
    double clean_sum = 0.0;
    unsigned char *dist;
    const char *kind = NULL;
    double min_fraction = 2.0;

    double t_setup = now_ns();

    R.measured = 1;
    R.placement = NULL;
    R.placement_verified = 1;
    int mem_nodes = 0, done_nodes = 0;
    size_t planned = R.buffer_bytes;
    double setup_deadline = t_setup + 0.4 * R.budget_ms * 1e6;
    for (int m = 0; m < T.nnodes; m++)
        mem_nodes += T.nodes[m].mem_total_kb > 0;
    for (int m = 0; m < T.nnodes; m++) {
        double left;
        if (T.nodes[m].mem_total_kb <= 0)
            continue;
        /* this node's share of what is left of the setup time */
        left = (setup_deadline - now_ns()) / (mem_nodes - done_nodes);
        alloc_buffer(m, planned, now_ns() + (left > 0 ? left : 0));
        done_nodes++;
        if (B[m].len < R.buffer_bytes) {
            static char reason[128];
            R.buffer_bytes = B[m].len;
            snprintf(reason, sizeof(reason), "%s, cut to fit the budget (planned %zu MiB)",
                     R.buffer_reason, planned / MIB);
            R.buffer_reason = reason;
        }
        kind = kind == NULL || strcmp(kind, B[m].kind) == 0 ? B[m].kind : "mixed";
        if (B[m].huge_fraction >= 0 && B[m].huge_fraction < min_fraction)
            min_fraction = B[m].huge_fraction;
        if (R.placement == NULL || strcmp(R.placement, B[m].placement) == 0)
            R.placement = B[m].placement;
        else
            R.placement = "mixed";
        if (B[m].placement_verified < R.placement_verified)
            R.placement_verified = B[m].placement_verified;
    }
    R.setup_ms = (now_ns() - t_setup) / 1e6;
    R.page_kind = kind ? kind : "base";
    R.huge_fraction = min_fraction <= 1.0 ? min_fraction : -1.0;
    R.page_size = (strcmp(R.page_kind, "hugetlb") == 0 ||
                   (strcmp(R.page_kind, "thp") == 0 && R.huge_fraction >= 0.5))
                      ? HUGE_2M
                      : 4096;

    for (int i = 0; i < T.nnodes; i++) {
        R.row_cpu[i] = first_allowed_cpu(&T.nodes[i]);
        if (R.row_cpu[i] < 0 && T.nodes[i].ncpus > 0)
            warn("no CPU of node %d is in this process's affinity mask: row skipped",
                 T.nodes[i].id);
        for (int j = 0; j < T.nnodes; j++) {
            if (R.row_cpu[i] < 0 || T.nodes[j].mem_total_kb <= 0)
                continue;
            cells_i[ncells] = i;
            cells_j[ncells] = j;
            ncells++;
        }
    }
    if (ncells == 0)
        die(3, "no CPU node can be measured (affinity mask excludes every node's CPUs)");
    double t_matrix = now_ns();
    /* calibrate: ns per access of each cell */
    for (int c = 0; c < ncells; c++) {
        int i = cells_i[c];
        if (R.row_cpu[i] != cur_cpu) {
            if (pin_cpu(R.row_cpu[i]) != 0)
                die(3, "cannot pin to cpu %d: %s", R.row_cpu[i], strerror(errno));
            cur_cpu = R.row_cpu[i];
        }
        time_chase(&B[cells_j[c]], 2000);
        est[c] = time_chase(&B[cells_j[c]], 20000);
        mean_est += est[c] / ncells;
    }
    reserve = 30e6 + 0.03 * R.budget_ms * 1e6;
    remaining = deadline - now_ns() - reserve;
    if (remaining < 0)
        remaining = 0;
    matrix_time = npairs ? 0.75 * remaining : remaining;
    /* short repetitions (<= 1 ms) are rarely hit by preemption on a busy host */
    rep_ns = matrix_time / (ncells * 30.0);
    if (rep_ns > 1e6)
        rep_ns = 1e6;
    if (rep_ns < 0.25e6)
        rep_ns = 0.25e6;
    if (rep_ns * ncells * MIN_REPS > matrix_time)
        rep_ns = matrix_time / (ncells * MIN_REPS);
    steps = (long long)(rep_ns / (mean_est > 0 ? mean_est : 100.0));
    if (steps < 500)
        steps = 500;
    R.steps_per_rep = steps;
    matrix_deadline = now_ns() + matrix_time;

    vals = xcalloc((size_t)ncells * MAX_REPS, sizeof(double));
    dist = xcalloc((size_t)ncells * MAX_REPS, 1);
    while (rounds < MAX_REPS) {
        double t_round = now_ns();
        if (rounds >= MIN_REPS && t_round + last_round > matrix_deadline)
            break;
        for (int c = 0; c < ncells; c++) {
            int i = cells_i[c];
            if (R.row_cpu[i] != cur_cpu) {
                pin_cpu(R.row_cpu[i]);
                cur_cpu = R.row_cpu[i];
                time_chase(&B[cells_j[c]], 256); /* settle after the migration */
            }
            vals[(size_t)c * MAX_REPS + rounds] = time_chase(&B[cells_j[c]], steps);
            dist[(size_t)c * MAX_REPS + rounds] = (unsigned char)g_disturbed;
            if (!g_disturbed)
                clean_sum += vals[(size_t)c * MAX_REPS + rounds], clean_n++;
        }
        rounds++;
        last_round = now_ns() - t_round;
        /* keep a repetition near rep_ns: follow the undisturbed ns/access seen so far (the
         * calibration may have been disturbed); every value is per access, so the step count
         * may change between rounds */
        if (clean_n > 0) {
            long long next = (long long)(rep_ns / (clean_sum / clean_n));
            steps = next < 500 ? 500 : next;
        }
    }
    R.steps_per_rep = steps;
    for (int c = 0; c < ncells; c++) {
        int i = cells_i[c], j = cells_j[c];
        stat_t st = summarize(vals + (size_t)c * MAX_REPS, dist + (size_t)c * MAX_REPS, rounds,
                              MIN_REPS);
        R.valid[i][j] = 1;
        R.reps[i][j] = st.used;
        R.lat[i][j] = st.median;
        R.cv[i][j] = st.cv;
        R.discarded_matrix += st.discarded;
        if (st.fallback) {
            R.matrix_unreliable = 1;
            warn("latency cpu node %d x memory node %d: fewer than %d undisturbed repetitions: "
                 "value unreliable",
                 T.nodes[i].id, T.nodes[j].id, MIN_REPS);
        }
    }
    free(vals);
    free(dist);
    R.matrix_ms = (now_ns() - t_matrix) / 1e6;
    t_matrix = now_ns();
    free_buffers();
    R.teardown_ms = (now_ns() - t_matrix) / 1e6;

    t_matrix = now_ns();
    if (T.virtualized == 1)
        relax_mask = 0xFu;
    if (npairs) {
        double t = now_ns(), left = deadline - t - reserve, share;
        if (left < 0)
            left = 0;
        share = left / npairs;
        if (R.within.present)
            measure_c2c(&R.within, now_ns() + share);
        if (R.across.present)
            measure_c2c(&R.across, now_ns() + share);
    }
    R.c2c_ms = (now_ns() - t_matrix) / 1e6;
}

/* ------------------------------------------------------------------------------------------ */
/* JSON output                                                                                 */

static int j_first[32];
static int j_depth;
static int j_after_key;

static void j_pre(void)
{
    if (j_after_key) {
        j_after_key = 0;
        return;
    }
    if (j_depth > 0 && !j_first[j_depth])
        putchar(',');
    j_first[j_depth] = 0;
}

static void j_open(char c)
{
    j_pre();
    putchar(c);
    j_first[++j_depth] = 1;
}

static void j_close(char c)
{
    putchar(c);
    j_depth--;
}

static void j_rawstr(const char *s)
{
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20)
            printf("\\u%04x", *p);
        else if (*p >= 0x7f)
            putchar('?'); /* keep the document ASCII whatever the file held */
        else
            putchar(*p);
    }
    putchar('"');
}

static void j_key(const char *k)
{
    j_pre();
    j_rawstr(k);
    putchar(':');
    j_after_key = 1;
}

static void j_str(const char *s)
{
    j_pre();
    if (s)
        j_rawstr(s);
    else
        fputs("null", stdout);
}

static void j_int(long long v)
{
    j_pre();
    printf("%lld", v);
}

static void j_null(void)
{
    j_pre();
    fputs("null", stdout);
}

static void j_bool(int v)
{
    j_pre();
    fputs(v ? "true" : "false", stdout);
}

static void j_num(double v, int decimals)
{
    j_pre();
    if (v != v || v > 1e300 || v < -1e300)
        fputs("null", stdout);
    else
        printf("%.*f", decimals, v);
}

static void j_kstr(const char *k, const char *v) { j_key(k); j_str(v); }
static void j_kint(const char *k, long long v) { j_key(k); j_int(v); }
static void j_knum(const char *k, double v, int d) { j_key(k); j_num(v, d); }
static void j_kbool(const char *k, int v) { j_key(k); j_bool(v); }
static void j_kintornull(const char *k, long long v)
{
    j_key(k);
    if (v < 0)
        j_null();
    else
        j_int(v);
}

static int sockets_disjoint(const node_t *x, const node_t *y)
{
    if (x->nsockets != 1 || y->nsockets != 1)
        return 0;
    return x->sockets[0] != y->sockets[0];
}

static void emit_c2c(const char *key, const c2c_t *c)
{
    j_key(key);
    if (!c->present) {
        j_null();
        return;
    }
    j_open('{');
    j_key("cpus");
    j_open('[');
    j_int(c->a);
    j_int(c->b);
    j_close(']');
    j_key("sockets");
    j_open('[');
    j_int(T.cpu_pkg[c->a]);
    j_int(T.cpu_pkg[c->b]);
    j_close(']');
    j_knum("median", c->median, 2);
    j_knum("cv", R.measured ? c->cv : 0.0, 4);
    j_kint("repetitions", R.measured ? c->reps : 0);
    j_kint("discarded", R.measured ? c->discarded : 0);
    j_kint("round_trips_per_rep", R.measured ? c->trips_per_rep : 0);
    j_close('}');
}

static void emit(void)
{
    double local = 0, remote = 0, cross = 0, cv_max = 0;
    int nlocal = 0, nremote = 0, ncross = 0, rep_min = -1, rep_max = 0, ok, within_budget;
    int c2c_min = -1;

    for (int i = 0; i < T.nnodes; i++)
        for (int j = 0; j < T.nnodes; j++) {
            if (!R.valid[i][j])
                continue;
            if (i == j)
                local += R.lat[i][j], nlocal++;
            else
                remote += R.lat[i][j], nremote++;
            if (i != j && sockets_disjoint(&T.nodes[i], &T.nodes[j]))
                cross += R.lat[i][j], ncross++;
            if (R.cv[i][j] > cv_max)
                cv_max = R.cv[i][j];
            if (rep_min < 0 || R.reps[i][j] < rep_min)
                rep_min = R.reps[i][j];
            if (R.reps[i][j] > rep_max)
                rep_max = R.reps[i][j];
        }
    if (R.within.present)
        c2c_min = R.measured ? R.within.reps : 0;
    if (R.across.present && (c2c_min < 0 || (R.measured ? R.across.reps : 0) < c2c_min))
        c2c_min = R.measured ? R.across.reps : 0;
    within_budget = R.duration_ms <= R.budget_ms;
    if (R.measured) {
        if (!within_budget)
            warn("run took %.0f ms, over the budget of %d ms", R.duration_ms, R.budget_ms);
        if (cv_max > R.cv_limit)
            warn("latency CV %.3f is above the limit %.3f: unstable host, re-run", cv_max,
                 R.cv_limit);
        if (rep_min < MIN_REPS)
            warn("fewer than %d repetitions fit in the budget", MIN_REPS);
        int small = T.llc_bytes > 0 && R.buffer_bytes < 2 * (size_t)T.llc_bytes;
        if (small && R.buffer_bytes != R.planned_bytes)
            warn("buffer is only %.1fx the LLC: part of the chase hits in cache",
                 (double)R.buffer_bytes / (double)T.llc_bytes);
        ok = within_budget && cv_max <= R.cv_limit && rep_min >= MIN_REPS &&
             R.placement_verified != 0 && !R.setup_failed && !small && !R.matrix_unreliable &&
             !R.within.unreliable && !R.across.unreliable;
    } else {
        ok = nlocal > 0;
    }

    j_open('{');
    j_kint("schema_version", SCHEMA_VERSION);
    j_kstr("probe_version", PROBE_VERSION);
    j_kstr("host", T.have_hostname ? T.hostname : NULL);
    j_kstr("boot_id", T.have_boot_id ? T.boot_id : NULL);
    j_kstr("kernel", T.have_kernel ? T.kernel : NULL);
    j_kstr("cpu_model", T.have_cpu_model ? T.cpu_model : NULL);
    j_kstr("sysroot", g_model ? g_sysroot : NULL);

    j_key("topology");
    j_open('{');
    j_kint("sockets", T.nsockets);
    j_kint("cpus", T.ncpus);
    j_kint("node_count", T.nnodes);
    j_key("nodes");
    j_open('[');
    for (int i = 0; i < T.nnodes; i++) {
        node_t *nd = &T.nodes[i];
        j_open('{');
        j_kint("id", nd->id);
        j_kstr("cpulist", nd->cpulist);
        j_key("cpus");
        j_open('[');
        for (int k = 0; k < nd->ncpus; k++)
            j_int(nd->cpus[k]);
        j_close(']');
        j_key("sockets");
        j_open('[');
        for (int k = 0; k < nd->nsockets; k++)
            j_int(nd->sockets[k]);
        j_close(']');
        j_kint("memory_total_kb", nd->mem_total_kb);
        j_kint("memory_free_kb", nd->mem_free_kb);
        j_kint("memory_mb", nd->mem_total_kb / 1024);
        j_kintornull("hugepages_2m_free", nd->hp2m_free);
        j_close('}');
    }
    j_close(']');
    j_key("distances");
    j_open('[');
    for (int i = 0; i < T.nnodes; i++) {
        j_open('[');
        for (int j = 0; j < T.nnodes; j++)
            j_int(T.dist[i][j]);
        j_close(']');
    }
    j_close(']');
    j_key("llc");
    if (T.llc_bytes > 0) {
        j_open('{');
        j_kint("bytes", T.llc_bytes);
        j_kint("level", T.llc_level);
        j_close('}');
    } else {
        j_null();
    }
    j_key("hugepages");
    j_open('{');
    j_kstr("thp", T.thp);
    j_kintornull("hugepages_2m_total", T.hp2m_total);
    j_kintornull("hugepages_2m_free", T.hp2m_free);
    j_kintornull("hugepages_1g_total", T.hp1g_total);
    j_kintornull("hugepages_1g_free", T.hp1g_free);
    j_close('}');
    j_key("virtualized");
    if (T.virtualized < 0)
        j_null();
    else
        j_bool(T.virtualized);
    j_close('}');

    j_key("latency_ns");
    j_open('{');
    j_kstr("source", R.measured ? "measured" : "model");
    j_kstr("model", R.measured ? NULL : "latency_ns = 90 * distance / 10");
    j_kstr("method", "random single-cycle pointer chase, one dependent load per 64-byte line; "
                     "rows: CPU node (thread pinned), columns: memory node (mbind)");
    j_key("nodes");
    j_open('[');
    for (int i = 0; i < T.nnodes; i++)
        j_int(T.nodes[i].id);
    j_close(']');
    j_key("cpus");
    j_open('[');
    for (int i = 0; i < T.nnodes; i++) {
        if (R.row_cpu[i] < 0)
            j_null();
        else
            j_int(R.row_cpu[i]);
    }
    j_close(']');
    j_key("matrix");
    j_open('[');
    for (int i = 0; i < T.nnodes; i++) {
        j_open('[');
        for (int j = 0; j < T.nnodes; j++) {
            if (R.valid[i][j])
                j_num(R.lat[i][j], 2);
            else
                j_null();
        }
        j_close(']');
    }
    j_close(']');
    j_key("cv");
    j_open('[');
    for (int i = 0; i < T.nnodes; i++) {
        j_open('[');
        for (int j = 0; j < T.nnodes; j++) {
            if (R.valid[i][j])
                j_num(R.cv[i][j], 4);
            else
                j_null();
        }
        j_close(']');
    }
    j_close(']');
    j_key("repetitions");
    j_open('[');
    for (int i = 0; i < T.nnodes; i++) {
        j_open('[');
        for (int j = 0; j < T.nnodes; j++)
            j_int(R.valid[i][j] ? R.reps[i][j] : 0);
        j_close(']');
    }
    j_close(']');
    j_kint("steps_per_rep", R.steps_per_rep);
    j_kint("buffer_bytes", (long long)R.buffer_bytes);
    j_kstr("buffer_reason", R.buffer_reason);
    j_knum("buffer_llc_ratio",
           T.llc_bytes > 0 ? (double)R.buffer_bytes / (double)T.llc_bytes : 0.0 / 0.0, 2);
    j_key("page");
    j_open('{');
    j_kstr("kind", R.page_kind);
    j_kint("size_bytes", (long long)R.page_size);
    j_knum("huge_fraction", R.huge_fraction >= 0 ? R.huge_fraction : 0.0 / 0.0, 3);
    j_close('}');
    j_kstr("placement", R.placement);
    j_key("placement_verified");
    if (R.placement_verified < 0)
        j_null();
    else
        j_bool(R.placement_verified);
    j_close('}');

    j_key("c2c_ns");
    j_open('{');
    j_kstr("source", R.measured ? "measured" : "model");
    j_kstr("model", R.measured ? NULL : "40 ns within a socket, 100 ns across sockets");
    j_kstr("method", "one-way latency = half the round trip of a cache-line ping-pong between "
                     "two pinned threads");
    emit_c2c("within_socket", &R.within);
    emit_c2c("across_sockets", &R.across);
    j_close('}');

    j_key("derived");
    j_open('{');
    j_knum("local_ns", nlocal ? local / nlocal : 0.0 / 0.0, 2);
    j_knum("remote_ns", nremote ? remote / nremote : 0.0 / 0.0, 2);
    j_knum("remote_local_ratio", nlocal && nremote ? (remote / nremote) / (local / nlocal)
                                                   : 0.0 / 0.0, 3);
    j_knum("cross_socket_ns", ncross ? cross / ncross : 0.0 / 0.0, 2);
    j_knum("cross_socket_ratio", nlocal && ncross ? (cross / ncross) / (local / nlocal)
                                                  : 0.0 / 0.0, 3);
    j_knum("c2c_across_within_ratio",
           R.within.present && R.across.present && R.within.median > 0
               ? R.across.median / R.within.median
               : 0.0 / 0.0,
           3);
    j_close('}');

    j_key("quality");
    j_open('{');
    j_kbool("measured", R.measured);
    j_kbool("ok", ok);
    j_knum("duration_ms", R.duration_ms, 1);
    j_knum("setup_ms", R.setup_ms, 1);
    j_knum("matrix_ms", R.matrix_ms, 1);
    j_knum("c2c_ms", R.c2c_ms, 1);
    j_knum("teardown_ms", R.teardown_ms, 1);
    j_kint("budget_ms", R.budget_ms);
    j_kbool("within_budget", within_budget);
    j_key("repetitions");
    j_open('{');
    j_kint("matrix_min", rep_min < 0 ? 0 : rep_min);
    j_kint("matrix_max", rep_max);
    j_kint("c2c_min", c2c_min < 0 ? 0 : c2c_min);
    j_kint("min_required", MIN_REPS);
    j_kint("discarded_matrix", R.discarded_matrix);
    j_kint("discarded_c2c", (R.within.present ? R.within.discarded : 0) +
                                (R.across.present ? R.across.discarded : 0));
    j_close('}');
    j_knum("cv_max", cv_max, 4);
    j_knum("c2c_cv_max",
           R.measured ? (R.within.present && R.within.cv > R.across.cv) || !R.across.present
                            ? R.within.cv
                            : R.across.cv
                      : 0.0,
           4);
    j_knum("cv_limit", R.cv_limit, 4);
    j_key("warnings");
    j_open('[');
    for (int k = 0; k < R.nwarn; k++)
        j_str(R.warnings[k]);
    j_close(']');
    j_close('}');
    j_close('}');
    putchar('\n');
}

/* ------------------------------------------------------------------------------------------ */

static void usage(FILE *f)
{
    fputs("usage: fleet-probe [--sysroot DIR] [--budget-ms N] [--buffer-mib N] [--cv-limit X]\n"
          "\n"
          "Reads the NUMA topology from /sys and measures a CPU-node x memory-node latency\n"
          "matrix (pointer chase) and core-to-core latency (ping-pong) within the budget\n"
          "(default 3000 ms). With --sysroot DIR it reads a fake tree and MODELS latencies\n"
          "from the SLIT distances (latency_ns = 90 * distance / 10). Prints one JSON document.\n",
          f);
}

static long long arg_int(const char *opt, const char *v, long long lo, long long hi)
{
    char *end;
    long long x;
    if (!v)
        die(2, "%s needs a value", opt);
    if (parse_uint(v, &end, &x) != 0 || *end || x < lo || x > hi)
        die(2, "%s: expected an integer in %lld..%lld, got '%s'", opt, lo, hi, excerpt(v));
    return x;
}

int main(int argc, char **argv)
{
    double t0 = now_ns();
    long long buffer_mib = 0;
    R.budget_ms = DEFAULT_BUDGET_MS;
    R.cv_limit = DEFAULT_CV_LIMIT;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--sysroot") == 0) {
            struct stat st;
            if (!v)
                die(2, "--sysroot needs a directory");
            if (stat(v, &st) != 0 || !S_ISDIR(st.st_mode))
                die(2, "--sysroot %s: not a directory", v);
            if (strlen(v) >= sizeof(g_sysroot) - 256)
                die(2, "--sysroot: path too long");
            snprintf(g_sysroot, sizeof(g_sysroot), "%s", v);
            while (strlen(g_sysroot) > 1 && g_sysroot[strlen(g_sysroot) - 1] == '/')
                g_sysroot[strlen(g_sysroot) - 1] = '\0';
            g_model = 1;
            i++;
        } else if (strcmp(a, "--budget-ms") == 0) {
            R.budget_ms = (int)arg_int(a, v, 100, 600000);
            i++;
        } else if (strcmp(a, "--buffer-mib") == 0) {
            buffer_mib = arg_int(a, v, 2, 65536);
            i++;
        } else if (strcmp(a, "--cv-limit") == 0) {
            char *end;
            double x;
            if (!v)
                die(2, "--cv-limit needs a value");
            x = strtod(v, &end);
            if (*end || !(x > 0.0 && x < 10.0))
                die(2, "--cv-limit: expected a number in (0, 10), got '%s'", excerpt(v));
            R.cv_limit = x;
            i++;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--version") == 0) {
            printf("fleet-probe %s (schema %d)\n", PROBE_VERSION, SCHEMA_VERSION);
            return 0;
        } else {
            usage(stderr);
            die(2, "unknown argument '%s'", excerpt(a));
        }
    }
    if (!g_model) {
        memset(g_allowed, 0, sizeof(g_allowed));
        if (syscall(SYS_sched_getaffinity, 0, sizeof(g_allowed), g_allowed) < 0)
            die(3, "sched_getaffinity: %s", strerror(errno));
    }
    read_topology();
    plan_buffer(buffer_mib);
    choose_pairs();
    if (g_model)
        run_model();
    else
        run_measure(t0 + R.budget_ms * 1e6);
    R.duration_ms = (now_ns() - t0) / 1e6;
    emit();
    if (fflush(stdout) != 0 || ferror(stdout))
        die(3, "cannot write the output: %s", strerror(errno));
    return 0;
}

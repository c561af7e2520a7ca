/* loadtest_host.c: steal and CPU time around `cpulm loadtest` trials (see loadtest_host.h). */
#define _GNU_SOURCE
#include "loadtest_host.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int lt_host_parse_stat(const char *text, lt_cpu_times *out) {
    const char *p = text;
    while (p && strncmp(p, "cpu ", 4) != 0) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    if (!p) return -1;
    p += 4;
    /* user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is
     * already counted in user and nice, so only the first eight are summed */
    uint64_t v[8];
    for (int i = 0; i < 8; i++) {
        char *end;
        v[i] = strtoull(p, &end, 10);
        if (end == p) {
            if (i < 4) return -1; /* steal appeared in Linux 2.6.11: older lines are short */
            for (; i < 8; i++)
                v[i] = 0;
            break;
        }
        p = end;
    }
    *out = (lt_cpu_times){0};
    for (int i = 0; i < 8; i++)
        out->total += v[i];
    out->idle = v[3] + v[4];
    out->steal = v[7];
    return 0;
}

int64_t lt_host_parse_pid_stat(const char *text, int children, int *ppid) {
    const char *p = strrchr(text, ')');
    if (!p) return -1;
    p++;
    /* after "pid (comm)": field 3 is the state; utime, stime, cutime, cstime are 14-17 */
    int64_t sum = 0;
    for (int field = 3; field <= 17; field++) {
        while (*p == ' ')
            p++;
        if (!*p || *p == '\n') return -1;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (field == 4 && ppid) *ppid = (int)v;
        if (field >= 14 && (field <= 15 || children)) {
            if (end == p || v < 0) return -1;
            sum += v;
        }
        p = end == p ? strchr(p, ' ') : end; /* the state is a letter */
        if (!p) return -1;
    }
    return sum;
}

int64_t lt_host_tree_ticks(const lt_proc *p, int n, int root) {
    /* mark root, then whoever's parent is marked, until a pass marks no one (a scan is
     * in no particular order; the depth of a server's tree is small) */
    unsigned char *in = calloc(n > 0 ? (size_t)n : 1, 1);
    if (!in) return -1;
    int found = 0, grew = 1;
    for (int i = 0; i < n; i++)
        if (p[i].pid == root) in[i] = 1, found = 1;
    while (found && grew) {
        grew = 0;
        for (int i = 0; i < n; i++)
            for (int j = 0; !in[i] && j < n; j++)
                if (in[j] && p[i].ppid == p[j].pid) in[i] = 1, grew = 1;
    }
    int64_t sum = 0;
    for (int i = 0; i < n; i++)
        if (in[i]) sum += p[i].ticks;
    free(in);
    return found ? sum : -1;
}

/* The file's first 4 KiB (the lines parsed here are far shorter); -1 when unreadable. */
static int read_small(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = 0;
    return n ? 0 : -1;
}

#ifdef __linux__
/* The server's process tree's ticks, from a scan of /proc (a few hundred files). */
static int64_t server_tree(int root) {
    DIR *d = opendir("/proc");
    if (!d) return -1;
    int n = 0, cap = 0;
    lt_proc *p = NULL;
    char path[64], buf[4096];
    for (struct dirent *e; (e = readdir(d));) {
        char *end;
        long pid = strtol(e->d_name, &end, 10);
        if (*end || pid <= 0) continue;
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        int ppid = 0;
        int64_t t;
        if (read_small(path, buf, sizeof buf) || (t = lt_host_parse_pid_stat(buf, 1, &ppid)) < 0)
            continue; /* gone since the listing */
        if (n == cap) {
            lt_proc *q = realloc(p, (size_t)(cap = cap ? 2 * cap : 256) * sizeof *p);
            if (!q) break;
            p = q;
        }
        p[n++] = (lt_proc){(int)pid, ppid, t};
    }
    closedir(d);
    int64_t sum = lt_host_tree_ticks(p, n, root);
    free(p);
    return sum;
}
#endif

void lt_host_sample_take(int server_pid, lt_host_sample *s) {
    *s = (lt_host_sample){.server = -1, .self = -1};
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s->wall = (double)ts.tv_sec + ts.tv_nsec * 1e-9;
#ifdef __linux__
    char buf[4096];
    s->ok = read_small("/proc/stat", buf, sizeof buf) == 0 && lt_host_parse_stat(buf, &s->cpu) == 0;
    if (read_small("/proc/self/stat", buf, sizeof buf) == 0)
        s->self = lt_host_parse_pid_stat(buf, 1, NULL);
    if (server_pid > 0) s->server = server_tree(server_pid);
#else
    (void)server_pid; /* no /proc: nothing sampled, no trial flagged */
#endif
}

void lt_host_use_of(const lt_host_sample *a, const lt_host_sample *b, double hz, lt_host_use *u) {
    *u = (lt_host_use){0};
    u->wall_s = b->wall - a->wall;
    if (!a->ok || !b->ok || hz <= 0 || u->wall_s <= 0 || b->cpu.total < a->cpu.total) return;
    const double total = (double)(b->cpu.total - a->cpu.total);
    const double steal = (double)(b->cpu.steal - a->cpu.steal);
    const double idle = (double)(b->cpu.idle - a->cpu.idle);
    const double ticks = hz * u->wall_s; /* one CPU's ticks over the trial */
    u->ticks = total;
    u->ok = total >= LT_HOST_MIN_TICKS;
    if (!u->ok) return;
    u->steal_share = steal / total;
    u->busy_cpus = (total - idle - steal) / ticks;
    if (a->self >= 0 && b->self >= a->self) u->self_cpus = (double)(b->self - a->self) / ticks;
    u->has_server = a->server >= 0 && b->server >= a->server;
    if (u->has_server) u->server_cpus = (double)(b->server - a->server) / ticks;
    u->other_cpus = u->busy_cpus - u->server_cpus - u->self_cpus;
    if (u->other_cpus < 0) u->other_cpus = 0; /* ticks are sampled, not exact */
}

int lt_host_disturbed(const lt_disturb_rule *r, const lt_host_use *u, int met,
                      double ref_server_cpus, char *why, size_t cap) {
    if (cap) why[0] = 0;
    if (!u->ok) return 0;
    if (r->steal_max > 0 && u->steal_share > r->steal_max) {
        snprintf(why, cap, "steal %.1f%% of the CPUs' time (limit %.1f%%)", u->steal_share * 100,
                 r->steal_max * 100);
        return 1;
    }
    if (r->cpu_drop > 0 && !met && u->has_server && ref_server_cpus > 0 &&
        u->server_cpus < r->cpu_drop * ref_server_cpus) {
        snprintf(why, cap,
                 "server CPU %.2f, under %g x the %.2f of a met trial at a lower load (other "
                 "processes %.2f CPUs)",
                 u->server_cpus, r->cpu_drop, ref_server_cpus, u->other_cpus);
        return 1;
    }
    return 0;
}

void lt_host_wait_calm(double steal_max, double window_s, double max_s, const lt_calm_src *src,
                       lt_calm *out) {
    *out = (lt_calm){.last_steal = -1};
    lt_host_sample first, a, b;
    if (src->sample(src->user, &first) || !first.ok) return;
    a = first;
    for (;;) {
        src->sleep(src->user, window_s);
        if (src->sample(src->user, &b) || !b.ok) return;
        out->waited_s = b.wall - first.wall;
        lt_host_use u;
        lt_host_use_of(&a, &b, 1, &u); /* the shares need no tick rate */
        if (u.ok) {                    /* else too few ticks yet: the window grows */
            out->windows++;
            out->last_steal = u.steal_share;
            if (u.steal_share <= steal_max) {
                out->calm = 1;
                return;
            }
            a = b;
        }
        if (out->waited_s >= max_s) return;
    }
}

static int proc_sample(void *user, lt_host_sample *s) {
    (void)user;
    lt_host_sample_take(0, s);
    return s->ok ? 0 : -1;
}

static void proc_sleep(void *user, double s) {
    (void)user;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

const lt_calm_src lt_calm_proc = {proc_sample, proc_sleep, NULL};

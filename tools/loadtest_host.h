/* loadtest_host.h: was the machine disturbed while a `cpulm loadtest` trial ran? On a shared
 * VM whole minutes run several times slower (the host takes the vCPUs: "steal" time), and
 * a trial run then decides an SLO search's verdict on the host's load, not the server's.
 * Around each trial the load test samples /proc/stat (all CPUs' time by kind, steal among
 * them), the server's /proc/PID/stat (--server-pid) and its own; from two samples it
 * derives the trial's steal share and CPU use, and a rule flags a disturbed trial, which
 * the search then runs again instead of counting it. Linux only: elsewhere the samples are
 * marked unavailable and no trial is ever flagged. The parsers take the files' text, so the
 * unit tests drive them with recorded samples. */
#ifndef CPULM_TOOLS_LOADTEST_HOST_H
#define CPULM_TOOLS_LOADTEST_HOST_H

#include <stddef.h>
#include <stdint.h>

/* The aggregate "cpu" line of /proc/stat, in USER_HZ ticks summed over all CPUs. */
typedef struct lt_cpu_times {
    uint64_t total; /* user nice system idle iowait irq softirq steal (guest is in user) */
    uint64_t idle;  /* idle + iowait */
    uint64_t steal;
} lt_cpu_times;

/* Parses /proc/stat text (its first "cpu " line). Returns 0, or -1 when not found. */
int lt_host_parse_stat(const char *text, lt_cpu_times *out);
/* utime + stime (ticks) from /proc/PID/stat text, whose command name may hold spaces and
 * parentheses (the fields follow the last ')'); with children, cutime + cstime too
 * (reaped children). -1 when malformed. ppid (may be NULL): the parent's id. */
int64_t lt_host_parse_pid_stat(const char *text, int children, int *ppid);

/* One process of a /proc scan. */
typedef struct lt_proc {
    int pid, ppid;
    int64_t ticks; /* utime + stime + cutime + cstime */
} lt_proc;
/* The ticks of root and every descendant of it among p[0..n): a server started through a
 * wrapper (a shell, a launcher) does its work in a child. Children reaped during a trial
 * moved their time into their parent's cutime, so the sum only grows. -1: root not there. */
int64_t lt_host_tree_ticks(const lt_proc *p, int n, int root);

typedef struct lt_host_sample {
    int ok;      /* /proc/stat was read */
    double wall; /* monotonic seconds */
    lt_cpu_times cpu;
    int64_t server; /* ticks of the server's process tree; -1: no --server-pid, or gone */
    int64_t self;   /* ticks of the load generator (and its reaped children) */
} lt_host_sample;

/* Samples now; server_pid <= 0: no server process is watched. */
void lt_host_sample_take(int server_pid, lt_host_sample *s);

/* One trial's use of the machine, from the samples before and after it. */
typedef struct lt_host_use {
    int ok, has_server;
    double wall_s, ticks; /* ticks: all CPUs' ticks between the samples */
    double steal_share;   /* stolen ticks / all ticks of all CPUs */
    double busy_cpus;     /* CPUs busy in the guest (not idle, not stolen), averaged */
    double server_cpus;   /* the server's CPU seconds per wall second (2.0: two CPUs' worth) */
    double self_cpus;     /* the load generator's */
    double other_cpus;    /* busy_cpus - server - self: everything else on the machine */
} lt_host_use;
/* hz: ticks per second (sysconf(_SC_CLK_TCK)). use->ok is 0 unless both samples are, and
 * unless the CPUs ran LT_HOST_MIN_TICKS ticks between them: /proc counts whole ticks (10 ms
 * at 100 Hz), so a shorter window's shares are noise (one stolen tick of 60 reads 1.7%). */
#define LT_HOST_MIN_TICKS 100
void lt_host_use_of(const lt_host_sample *a, const lt_host_sample *b, double hz, lt_host_use *use);

/* When a trial counts as disturbed:
 * - steal: its steal share is above steal_max (the host ran something else on our CPUs);
 * - server CPU drop: it missed the objective while the server used less than cpu_drop x
 *   ref_server_cpus, the most CPU the server used in a trial that met the objective at a
 *   load no higher than this one in the same search. A server overloaded for real is at
 *   least as busy as at a lower load it carried; one that was busy less was kept from its
 *   CPUs (by the host or by other processes), so its miss says nothing about its capacity.
 * steal_max <= 0 or cpu_drop <= 0 turns that rule off. */
typedef struct lt_disturb_rule {
    double steal_max, cpu_drop;
} lt_disturb_rule;

/* 1 and why (one line) when disturbed, else 0; ref_server_cpus <= 0: no reference yet. */
int lt_host_disturbed(const lt_disturb_rule *r, const lt_host_use *u, int met,
                      double ref_server_cpus, char *why, size_t cap);

/* --disturb-wait: before a trial flagged for steal runs again, wait until the host's steal
 * over a short window is back within the limit (a spell lasts minutes, so a rerun at once
 * would land in it again and use up the retries), for at most max_s seconds. The samples
 * and the sleeps come through callbacks: the load test reads /proc/stat and sleeps, the
 * tests replay recorded /proc/stat lines on a clock of their own. */
#define LT_CALM_WINDOW_S 2.0 /* 400 ticks on 2 CPUs at 100 Hz: a share to 0.25% */
typedef struct lt_calm_src {
    int (*sample)(void *user, lt_host_sample *s); /* 0, or -1: nothing to read (stop) */
    void (*sleep)(void *user, double s);
    void *user;
} lt_calm_src;

typedef struct lt_calm {
    int calm;          /* 1: the last window's steal was within the limit */
    int windows;       /* windows measured */
    double waited_s;   /* from the first sample to the last */
    double last_steal; /* steal share of the last measured window (-1: none measured) */
} lt_calm;

/* Windows of window_s seconds; a window of fewer than LT_HOST_MIN_TICKS ticks is extended
 * (one more sleep) rather than judged. Stops calm at the first window within steal_max,
 * not calm once max_s is used up or a sample cannot be taken. */
void lt_host_wait_calm(double steal_max, double window_s, double max_s, const lt_calm_src *src,
                       lt_calm *out);
/* The load test's source: /proc/stat and nanosleep (user unused). */
extern const lt_calm_src lt_calm_proc;

#endif

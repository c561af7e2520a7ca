/* cache.c: compiled grammars by text (see grammar.h for the contract).
 *
 * A small table, scanned: the cache holds tens of entries (64 by default), so a lookup is a
 * pass of hash compares plus one full compare on a match, well below the cost of one token;
 * LRU is a use stamp per entry, and eviction takes the oldest. The mutex is held only for
 * lookups and inserts, never while compiling, so a slow compile never blocks a cache hit.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar_int.h"

typedef struct centry {
    uint64_t hash, used;
    char *key; /* root name, NUL, text */
    size_t key_len, bytes;
    cpulm_grammar *g; /* the cache's reference */
} centry;

struct cpulm_grammar_cache {
    pthread_mutex_t mu;
    centry *e;
    int32_t n, max_entries;
    size_t bytes, max_bytes;
    uint64_t clock;
    cpulm_grammar_cache_stats st;
};

static uint64_t fnv(const char *s, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 0x100000001B3ull;
    return h;
}

cpulm_grammar_cache *cpulm_grammar_cache_new(int32_t max_entries, size_t max_bytes) {
    cpulm_grammar_cache *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->max_entries = max_entries > 0 ? max_entries : 0;
    c->max_bytes = max_bytes;
    c->e = calloc((size_t)c->max_entries + 1, sizeof *c->e);
    if (!c->e || pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c->e);
        free(c);
        return NULL;
    }
    return c;
}

static void drop(cpulm_grammar_cache *c, int32_t i) {
    c->bytes -= c->e[i].bytes;
    cpulm_grammar_free(c->e[i].g);
    free(c->e[i].key);
    c->e[i] = c->e[--c->n];
}

void cpulm_grammar_cache_free(cpulm_grammar_cache *c) {
    if (!c) return;
    while (c->n > 0)
        drop(c, c->n - 1);
    pthread_mutex_destroy(&c->mu);
    free(c->e);
    free(c);
}

/* The entry for key, or -1. Called with mu held. */
static int32_t find(const cpulm_grammar_cache *c, uint64_t h, const char *key, size_t n) {
    for (int32_t i = 0; i < c->n; i++)
        if (c->e[i].hash == h && c->e[i].key_len == n && !memcmp(c->e[i].key, key, n)) return i;
    return -1;
}

/* Makes room for an entry of b bytes (evicting least recently used ones) and adds it;
 * takes over key and one reference of g. Called with mu held. */
static void insert(cpulm_grammar_cache *c, uint64_t h, char *key, size_t n, cpulm_grammar *g) {
    size_t b = n + cpulm_grammar_bytes(g);
    if (c->max_entries == 0 || b > c->max_bytes) {
        free(key);
        cpulm_grammar_free(g);
        return;
    }
    while (c->n > 0 && (c->n >= c->max_entries || c->bytes + b > c->max_bytes)) {
        int32_t old = 0;
        for (int32_t i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[old].used) old = i;
        drop(c, old);
        c->st.evictions++;
    }
    c->e[c->n++] = (centry){h, ++c->clock, key, n, b, g};
    c->bytes += b;
}

/* "root\0text" as one key, so the same text with another root is another grammar. */
static char *make_key(const char *root, const char *text, size_t len, size_t *n) {
    size_t rl = strlen(root) + 1;
    char *k = malloc(rl + len + 1);
    if (!k) return NULL;
    memcpy(k, root, rl);
    if (len) memcpy(k + rl, text, len);
    *n = rl + len;
    return k;
}

cpulm_status cpulm_grammar_cache_get(cpulm_grammar_cache *c, const char *text, size_t len,
                                     const char *root, cpulm_grammar **out, cpulm_error *err) {
    *out = NULL;
    if (!c) return cpulm_grammar_parse(text, len, root, out, err);
    if (!root) root = "root";
    size_t n;
    char *key = make_key(root, text, len, &n);
    if (!key) return cpulm_errf(err, CPULM_ERR_NOMEM, "grammar: out of memory");
    uint64_t h = fnv(key, n, 0xCBF29CE484222325ull);
    pthread_mutex_lock(&c->mu);
    int32_t i = find(c, h, key, n);
    if (i >= 0) {
        c->e[i].used = ++c->clock;
        c->st.hits++;
        *out = cpulm_grammar_ref(c->e[i].g);
    } else
        c->st.misses++;
    pthread_mutex_unlock(&c->mu);
    if (*out) {
        free(key);
        return CPULM_OK;
    }
    cpulm_grammar *g = NULL;
    cpulm_status st = cpulm_grammar_parse(text, len, root, &g, err);
    if (st != CPULM_OK) {
        free(key);
        return st;
    }
    pthread_mutex_lock(&c->mu);
    if (find(c, h, key, n) < 0) /* another thread may have inserted it meanwhile */
        insert(c, h, key, n, cpulm_grammar_ref(g));
    else
        free(key);
    pthread_mutex_unlock(&c->mu);
    *out = g;
    return CPULM_OK;
}

void cpulm_grammar_cache_stats_get(cpulm_grammar_cache *c, cpulm_grammar_cache_stats *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->st;
    out->entries = c->n;
    out->bytes = c->bytes;
    pthread_mutex_unlock(&c->mu);
}

static cpulm_grammar_cache *shared;
static pthread_once_t shared_once = PTHREAD_ONCE_INIT;

static void shared_init(void) {
    shared = cpulm_grammar_cache_new(64, 64u << 20);
}

cpulm_grammar_cache *cpulm_grammar_cache_shared(void) {
    pthread_once(&shared_once, shared_init);
    return shared;
}

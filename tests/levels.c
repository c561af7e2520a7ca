/* levels.c: the levels every kernel test iterates (see levels.h). The emulated avx512 tables
 * are the avx512* kernel files built a second time on SIMDe with their external symbols
 * renamed *_emu (cmake/emu512.cmake); they prove the arithmetic of those levels on CPUs
 * without AVX-512, not their speed. CPULM_TEST_EMU_ALL=1 adds them where the CPU runs the level
 * natively too, so a native run checks the emulation itself (native and emulated against the
 * same generic bits). */
#include "levels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NATIVE 16

#if defined(__x86_64__)
/* The x86 levels of the avx512 family, in dispatch.c's ladder order, with their bases. */
typedef struct emu_level {
    const char *level, *base, *name;
    const cpulm_kernels *table; /* NULL: not built */
} emu_level;

#if defined(CPULM_TEST_EMU512)
extern const cpulm_kernels cpulm_kernels_avx512_emu, cpulm_kernels_avx512vnni_emu,
    cpulm_kernels_avx512bf16_emu;
#define EMU_AVX512     (&cpulm_kernels_avx512_emu)
#define EMU_AVX512VNNI (&cpulm_kernels_avx512vnni_emu)
#define EMU_AVX512BF16 (&cpulm_kernels_avx512bf16_emu)
#else
#define EMU_AVX512     NULL
#define EMU_AVX512VNNI NULL
#define EMU_AVX512BF16 NULL
#endif

static const emu_level emu[] = {
    {"avx512", "avx2", "avx512(emu)", EMU_AVX512},
    {"avx512vnni", "avx512", "avx512vnni(emu)", EMU_AVX512VNNI},
    {"avx512bf16", "avx512vnni", "avx512bf16(emu)", EMU_AVX512BF16},
};
#define N_EMU ((int)(sizeof emu / sizeof emu[0]))

static struct {
    pthread_once_t once;
    cpulm_kernels merged[N_EMU];
    int built[N_EMU];     /* merged[i] is valid */
    int unchecked[N_EMU]; /* not native and not emulated */
} st = {.once = PTHREAD_ONCE_INIT};

/* The merged table named `level`: a native one, else one emulated above. */
static const cpulm_kernels *find(const cpulm_kernels *const *nat, int n, const char *level) {
    for (int i = 0; i < n; i++)
        if (strcmp(nat[i]->name, level) == 0) return nat[i];
    for (int i = 0; i < N_EMU; i++)
        if (st.built[i] && strcmp(emu[i].level, level) == 0) return &st.merged[i];
    return NULL;
}

static const cpulm_kernels *find_emu(const char *level) {
    for (int i = 0; i < N_EMU; i++)
        if (st.built[i] && strcmp(emu[i].level, level) == 0) return &st.merged[i];
    return NULL;
}

static void init_once(void) {
    const cpulm_kernels *nat[MAX_NATIVE];
    const int n = cpulm_kernels_levels(nat, MAX_NATIVE);
    for (int i = 0; i < N_EMU; i++) {
        const char *all = getenv("CPULM_TEST_EMU_ALL");
        if (find(nat, n, emu[i].level) && !(all && *all == '1'))
            continue;                                      /* runs natively: tested as such */
        const cpulm_kernels *base = find_emu(emu[i].base); /* an emulated chain stays one */
        if (!base) base = find(nat, n, emu[i].base);
        if (!emu[i].table || !base) { /* no SIMDe, or the CPU lacks even the base (AVX2) */
            st.unchecked[i] = 1;
            continue;
        }
        st.merged[i] = *base;
        cpulm_kernels_overlay(&st.merged[i], emu[i].table);
        st.merged[i].name = emu[i].name;
        st.built[i] = 1;
    }
}
#endif

int test_kernel_levels(const cpulm_kernels **out, int cap) {
    int n = cpulm_kernels_levels(out, cap);
#if defined(__x86_64__)
    pthread_once(&st.once, init_once);
    for (int i = 0; i < N_EMU && n < cap; i++)
        if (st.built[i]) out[n++] = &st.merged[i];
#endif
    return n;
}

int test_emu512_unchecked(char *why, size_t cap) {
    int count = 0;
    if (cap) why[0] = 0;
#if defined(__x86_64__)
    pthread_once(&st.once, init_once);
    size_t len = 0;
    for (int i = 0; i < N_EMU; i++) {
        if (!st.unchecked[i]) continue;
        count++;
        if (len < cap)
            len += (size_t)snprintf(why + len, cap - len, "%s%s", len ? ", " : "", emu[i].level);
    }
#endif
    return count;
}

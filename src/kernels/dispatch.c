/* dispatch.c: picks the kernel table for the running CPU, once.
 *
 * Levels form a small tree (each extends a base level); a level is usable when its
 * translation unit was built (CPULM_HAVE_<LEVEL>, set by cmake/kernels.cmake for the files
 * of the target architecture), its base is usable, and the CPU (and the OS, for register state)
 * supports every feature its flags assume. The merged table of a level is its base's merged table
 * with the level's non-NULL entries laid over it, so a level only implements what it speeds up. The
 * chosen level is the last usable one in ladder order, or CPULM_ISA=<name> when that names a usable
 * level (anything else falls back to the best and records a warning). This file must never execute
 * an instruction of a level it has not verified.
 *
 * CPU generations, for orientation: avx2 = Haswell (2013) / Zen 1; avx512 = Skylake-SP;
 * avx512vnni = Cascade Lake / Ice Lake; avx512bf16 (vdpbf16ps for the attention's bf16 products
 * under CPULM_ATTN_BF16) = Cooper Lake, Zen 4 / 5; amx (int8 tiles for the prompt GEMM) =
 * Sapphire / Emerald / Granite Rapids (which all have AVX512-BF16, so amx extends avx512bf16).
 * avxvnni (Alder Lake, AVX-512 fused off) is reported as a feature but has no level: no kernel
 * uses it (a level is added with its source file, its line in cmake/kernels.cmake and its row
 * below). arm: dotprod = Cortex-A55/A76,
 * Neoverse N1 (Graviton2); i8mm + sve = Neoverse V1 (Graviton3), V2 (Graviton4).
 */
#define _GNU_SOURCE /* syscall (the AMX permission request) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpulm.h"
#include "kernels/kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define ARCH_X86 1
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#elif defined(__aarch64__)
#include <sys/auxv.h>
#define ARCH_ARM 1
#endif

/* ---- per-level tables, present only when built (references guarded here only) ---- */

#if defined(CPULM_HAVE_AVX2)
#define TABLE_AVX2 (&cpulm_kernels_avx2)
#else
#define TABLE_AVX2 NULL
#endif
#if defined(CPULM_HAVE_AVX512)
#define TABLE_AVX512 (&cpulm_kernels_avx512)
#else
#define TABLE_AVX512 NULL
#endif
#if defined(CPULM_HAVE_AVX512VNNI)
#define TABLE_AVX512VNNI (&cpulm_kernels_avx512vnni)
#else
#define TABLE_AVX512VNNI NULL
#endif
#if defined(CPULM_HAVE_AVX512BF16)
#define TABLE_AVX512BF16 (&cpulm_kernels_avx512bf16)
#else
#define TABLE_AVX512BF16 NULL
#endif
#if defined(CPULM_HAVE_AMX)
#define TABLE_AMX (&cpulm_kernels_amx)
#else
#define TABLE_AMX NULL
#endif
#if defined(CPULM_HAVE_NEON)
#define TABLE_NEON (&cpulm_kernels_neon)
#else
#define TABLE_NEON NULL
#endif
#if defined(CPULM_HAVE_DOTPROD)
#define TABLE_DOTPROD (&cpulm_kernels_dotprod)
#else
#define TABLE_DOTPROD NULL
#endif
#if defined(CPULM_HAVE_I8MM)
#define TABLE_I8MM (&cpulm_kernels_i8mm)
#else
#define TABLE_I8MM NULL
#endif
#if defined(CPULM_HAVE_SVE)
#define TABLE_SVE (&cpulm_kernels_sve)
#else
#define TABLE_SVE NULL
#endif

/* ---- CPU features ---- */

enum {
    F_AVX2 = 1u << 0,   /* with FMA, F16C and OS-enabled YMM state */
    F_AVX512 = 1u << 1, /* F + BW + VL + DQ with OS-enabled ZMM / opmask state */
    F_AVX512VNNI = 1u << 2,
    F_AMX = 1u << 3, /* AMX-TILE + AMX-INT8, tile state enabled in XCR0 and granted to us */
    F_AVX512BF16 = 1u << 4,
    F_NEON = 1u << 5,
    F_DOTPROD = 1u << 6,
    F_I8MM = 1u << 7,
    F_SVE = 1u << 8,
};

typedef struct level_desc {
    const char *name;
    const cpulm_kernels *table; /* NULL: not built for this target */
    int base;                   /* index of the level it extends; -1 for generic */
    unsigned need;              /* F_* bits the level's compile flags assume */
} level_desc;

/* Ladder order = preference order: the best usable level is the last one. */
static const level_desc levels[] = {
    {"generic", &cpulm_kernels_generic, -1, 0},
#if defined(ARCH_X86)
    {"avx2", TABLE_AVX2, 0, F_AVX2},
    {"avx512", TABLE_AVX512, 1, F_AVX2 | F_AVX512},
    {"avx512vnni", TABLE_AVX512VNNI, 2, F_AVX2 | F_AVX512 | F_AVX512VNNI},
    {"avx512bf16", TABLE_AVX512BF16, 3, F_AVX2 | F_AVX512 | F_AVX512VNNI | F_AVX512BF16},
    {"amx", TABLE_AMX, 4, F_AVX2 | F_AVX512 | F_AVX512VNNI | F_AVX512BF16 | F_AMX},
#elif defined(ARCH_ARM)
    {"neon", TABLE_NEON, 0, F_NEON},
    {"dotprod", TABLE_DOTPROD, 1, F_NEON | F_DOTPROD},
    {"i8mm", TABLE_I8MM, 2, F_NEON | F_DOTPROD | F_I8MM},
    {"sve", TABLE_SVE, 3, F_NEON | F_DOTPROD | F_I8MM | F_SVE},
#endif
};
#define N_LEVELS ((int)(sizeof levels / sizeof levels[0]))

#if defined(ARCH_X86)
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    /* xgetbv by opcode name needs no -mxsave; only called when OSXSAVE is set */
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

/* AMX needs three yeses: the core has AMX-TILE and AMX-INT8 (CPUID.(7,0):EDX bits 24, 25), the
 * OS saves the tile configuration and data (XCR0 bits 17, 18), and, on Linux, this process
 * was granted the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA =
 * 18): without the grant the first tile instruction faults (SIGILL). The grant is process-wide
 * and lasts, so asking once here (before any thread runs a kernel) covers every thread.
 * Returns 1 when all hold; *why names what failed for the feature line ("" when the core has
 * no AMX at all). */
static int amx_usable(unsigned edx7, uint64_t xcr0, const char **why) {
    *why = "";
    if (!((edx7 >> 24) & 1) || !((edx7 >> 25) & 1)) return 0;
    if ((xcr0 & (3ull << 17)) != (3ull << 17)) {
        *why = " (os: no amx state)";
        return 0;
    }
#if defined(__linux__) && defined(SYS_arch_prctl)
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) != 0) {
        *why = " (os: amx not granted)";
        return 0;
    }
    return 1;
#else
    *why = " (amx: os not supported)";
    return 0;
#endif
}

/* CPUID says what the core implements; XCR0 says whether the OS saves the wider register
 * state on context switches. Without the latter, AVX instructions fault or corrupt state. */
static unsigned detect_features(char *desc, size_t cap) {
    unsigned a, b, c, d, f = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d) || a < 7) return 0;
    const unsigned max_leaf = a;
    __cpuid_count(1, 0, a, b, c, d);
    const int fma = (c >> 12) & 1, osxsave = (c >> 27) & 1, f16c = (c >> 29) & 1;
    const uint64_t xcr0 = osxsave ? read_xcr0() : 0;
    const int os_ymm = (xcr0 & 0x6) == 0x6, os_zmm = (xcr0 & 0xe6) == 0xe6;
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned leaf7_max_sub = a, ebx7 = b, ecx7 = c, edx7 = d;
    unsigned eax71 = 0;
    if (max_leaf >= 7 && leaf7_max_sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        eax71 = a;
    }
    const int avx2 = (ebx7 >> 5) & 1;
    const int avx512 = ((ebx7 >> 16) & 1) && ((ebx7 >> 17) & 1) && ((ebx7 >> 30) & 1) &&
                       ((ebx7 >> 31) & 1); /* F, DQ, BW, VL */
    if (avx2 && fma && f16c && os_ymm) f |= F_AVX2;
    if ((f & F_AVX2) && avx512 && os_zmm) f |= F_AVX512;
    if ((f & F_AVX512) && (ecx7 >> 11) & 1) f |= F_AVX512VNNI;
    if ((f & F_AVX512VNNI) && (eax71 >> 5) & 1) f |= F_AVX512BF16;
    const char *amx_why;
    if (amx_usable(edx7, xcr0, &amx_why) && (f & F_AVX512VNNI)) f |= F_AMX;
    snprintf(desc, cap, "x86_64:%s%s%s%s%s%s%s%s%s%s%s%s%s", avx2 ? " avx2" : "", fma ? " fma" : "",
             f16c ? " f16c" : "", os_ymm ? "" : " (os: no ymm)", avx512 ? " avx512f/bw/vl/dq" : "",
             avx512 && !os_zmm ? " (os: no zmm)" : "", (ecx7 >> 11) & 1 ? " avx512vnni" : "",
             (eax71 >> 5) & 1 ? " avx512bf16" : "", (eax71 >> 4) & 1 ? " avxvnni" : "",
             (edx7 >> 24) & 1 ? " amx-tile" : "", (edx7 >> 25) & 1 ? " amx-int8" : "",
             (edx7 >> 22) & 1 ? " amx-bf16" : "", amx_why);
    return f;
}
#elif defined(ARCH_ARM)
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1UL << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1UL << 20)
#endif
#ifndef HWCAP_SVE
#define HWCAP_SVE (1UL << 22)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1UL << 13)
#endif

static unsigned detect_features(char *desc, size_t cap) {
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    unsigned f = 0;
    if (hw & HWCAP_ASIMD) f |= F_NEON;
    if (hw & HWCAP_ASIMDDP) f |= F_DOTPROD;
    if (hw2 & HWCAP2_I8MM) f |= F_I8MM;
    if (hw & HWCAP_SVE) f |= F_SVE;
    snprintf(desc, cap, "aarch64:%s%s%s%s", f & F_NEON ? " asimd" : "",
             f & F_DOTPROD ? " asimddp" : "", f & F_I8MM ? " i8mm" : "", f & F_SVE ? " sve" : "");
    return f;
}
#else
static unsigned detect_features(char *desc, size_t cap) {
    snprintf(desc, cap, "unknown architecture: portable C only");
    return 0;
}
#endif

/* ---- merging ---- */

/* Every entry of kernels.h's op list: a level's non-NULL entry replaces its base's. */
void cpulm_kernels_overlay(cpulm_kernels *k, const cpulm_kernels *lvl) {
    k->name = lvl->name;
    for (int t = 0; t < CPULM_DTYPE_COUNT; t++) {
#define TAKE_TYPED(ID, name, fn) \
    if (lvl->name[t]) k->name[t] = lvl->name[t];
        CPULM_KERNEL_TYPED_OPS(TAKE_TYPED)
#undef TAKE_TYPED
        /* a GEMM, the layout it reads and its multi-group form come from the same level */
        if (lvl->gemm_x16[t]) {
            k->x16_layout[t] = lvl->x16_layout[t];
            k->x16_groups[t] = lvl->x16_groups[t];
        }
    }
#define TAKE(ID, name, ret, params, group) \
    if (lvl->name) k->name = lvl->name;
    CPULM_KERNEL_OPS(TAKE)
#undef TAKE
}

static struct {
    pthread_once_t once;
    cpulm_kernels merged[N_LEVELS];
    int usable[N_LEVELS];
    int chosen;
    char features[256];
    char warning[160];
} state = {.once = PTHREAD_ONCE_INIT};

static int find_level(const char *name) {
    for (int i = 0; i < N_LEVELS; i++)
        if (strcmp(levels[i].name, name) == 0) return i;
    return -1;
}

static void init_once(void) {
    const unsigned f = detect_features(state.features, sizeof state.features);
    for (int i = 0; i < N_LEVELS; i++) {
        const level_desc *l = &levels[i];
        if (l->base < 0) {
            state.merged[i] = *l->table;
            state.usable[i] = 1;
            continue;
        }
        if (!l->table || (f & l->need) != l->need || !state.usable[l->base]) continue;
        state.merged[i] = state.merged[l->base];
        cpulm_kernels_overlay(&state.merged[i], l->table);
        state.usable[i] = 1;
        state.chosen = i;
    }
    const char *want = getenv("CPULM_ISA");
    if (!want || !*want) return;
    const int i = find_level(want);
    if (i >= 0 && state.usable[i]) {
        state.chosen = i;
        return;
    }
    snprintf(state.warning, sizeof state.warning, "CPULM_ISA=%.40s: %s; using %s", want,
             i < 0 ? "unknown level" : "not supported by this CPU or build",
             levels[state.chosen].name);
}

const cpulm_kernels *cpulm_kernels_get(void) {
    pthread_once(&state.once, init_once);
    return &state.merged[state.chosen];
}

int cpulm_kernels_levels(const cpulm_kernels **out, int cap) {
    pthread_once(&state.once, init_once);
    int n = 0;
    for (int i = 0; i < N_LEVELS && n < cap; i++)
        if (state.usable[i]) out[n++] = &state.merged[i];
    return n;
}

const char *cpulm_kernels_isa_warning(void) {
    pthread_once(&state.once, init_once);
    return state.warning[0] ? state.warning : NULL;
}

const char *cpulm_cpu_features(void) {
    pthread_once(&state.once, init_once);
    return state.features;
}

int cpulm_kernels_packs(const cpulm_kernels *k, cpulm_dtype t, int64_t n_rows) {
    if ((unsigned)t >= CPULM_DTYPE_COUNT || n_rows % CPULM_PACK_ROWS != 0) return 0;
    const cpulm_gemm_fn g = k->gemm_x16[t], portable = cpulm_kernels_generic.gemm_x16[t];
    return portable && g && g != portable;
}

cpulm_dtype cpulm_kernels_packs_as(cpulm_dtype t) {
    return cpulm_widens_to_q8_0(t) ? CPULM_DTYPE_Q8_0 : t; /* format/quant.h: which, how */
}

const char *cpulm_kernel_level(void) {
    return cpulm_kernels_get()->name;
}

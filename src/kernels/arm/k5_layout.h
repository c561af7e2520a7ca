/* k5_layout.h: the aarch64 packed layout of Q5_K quants, the per-arch hook of the 16-row
 * layout (kernels.h), like k6_layout.h for Q6_K. Plain C: used by the loader
 * (model/repack.c), the generic oracle (generic/gemm_k.c) and the ARM GEMM (x16_ksdot.h),
 * in aarch64 builds only.
 *
 * Why: the shared layout keeps Q5_K's qh / qs fields, so the SDOT tile spent 2 loads and ~3
 * vector ops per weight vector (the nibble, the 5th bit shifted into place, a BSL). Here a
 * group super-block's 2560 bytes from offset CPULM_K5A_OFF (where qh and qs were; d, dmin
 * and scales stay) hold each quant q (0..31) in the low 5 bits of a byte, and the 3 free
 * top bits of five bytes carry three more quants: 8 weight vectors from 5 loads and 15 ops
 * (5 AND, 3 + 4 + 3 shifts and inserts), values q as before (no bias, no factor).
 *
 * Sub-block j (elements 32j..32j+31) takes chunks 5j .. 5j + 4 (64 bytes each); byte 4r + b
 * of chunk 5j + k (k = 0..4) of row r holds in bits 4..0 the quant of element 32j + 4k + b,
 * and in bits 7..5, with q5, q6, q7 the quants of elements 32j + 20 + b, + 24 + b, + 28 + b:
 *   k = 0: q5 bits 4..2;   k = 1: q5 bits 1..0, q6 bit 4;   k = 2: q6 bits 3..1;
 *   k = 3: q6 bit 0, q7 bits 1..0;   k = 4: q7 bits 4..2.
 * A 16-byte slice of a chunk is 4 quants of 4 rows (the SDOT layout of x16_ksdot.h). */
#ifndef CPULM_KERNELS_ARM_K5_LAYOUT_H
#define CPULM_KERNELS_ARM_K5_LAYOUT_H

#include <stdint.h>
#include <string.h>

#define CPULM_K5A_OFF    256  /* byte offset of the quants in a group super-block (qh's) */
#define CPULM_K5A_QBYTES 2560 /* their bytes (16 rows x 160) */

/* Quant e (0..255) of a Q5_K block's qh (32 bytes) and qs (128), 0..31: element 32j + l is
 * nibble j % 2 of qs[32 (j / 2) + l] plus bit j of qh[l] as bit 4. */
static inline int cpulm_k5_quant(const uint8_t *qh, const uint8_t *qs, int e) {
    const int j = e / 32, l = e % 32;
    return (qs[32 * (j / 2) + l] >> (4 * (j % 2)) & 0xF) | (qh[l] >> j & 1) << 4;
}

/* The quant (0..31) of element e of row r (0..15) from a group super-block's packed quants qr. */
static inline int cpulm_k5a_get(const uint8_t *qr, int r, int e) {
    const int j = e / 32, k = e % 32 / 4, b = e % 4;
    const uint8_t *p = qr + 64 * 5 * j + 4 * r + b;
    switch (k) {
    case 5: return (p[0] >> 5) << 2 | p[64] >> 6;
    case 6: return (p[64] >> 5 & 1) << 4 | (p[128] >> 5) << 1 | p[192] >> 7;
    case 7: return (p[256] >> 5) << 2 | (p[192] >> 5 & 3);
    default: return p[64 * k] & 0x1F;
    }
}

/* Row r's quants of one Q5_K block (qh, qs: the block's fields) into qr, its 4 bytes of
 * every chunk. */
static inline void cpulm_k5a_put_row(uint8_t *qr, int r, const uint8_t *qh, const uint8_t *qs) {
    for (int j = 0; j < 8; j++)
        for (int b = 0; b < 4; b++) {
            int q[8];
            for (int k = 0; k < 8; k++)
                q[k] = cpulm_k5_quant(qh, qs, 32 * j + 4 * k + b);
            const int top[5] = {q[5] >> 2, (q[5] & 3) << 1 | q[6] >> 4, q[6] >> 1 & 7,
                                (q[6] & 1) << 2 | (q[7] & 3), q[7] >> 2};
            for (int k = 0; k < 5; k++)
                qr[64 * (5 * j + k) + 4 * r + b] = (uint8_t)(q[k] | top[k] << 5);
        }
}

/* Row r's qh and qs fields rebuilt from qr (the inverse of cpulm_k5a_put_row). */
static inline void cpulm_k5a_get_row(const uint8_t *qr, int r, uint8_t *qh, uint8_t *qs) {
    memset(qh, 0, 32);
    memset(qs, 0, 128);
    for (int e = 0; e < 256; e++) {
        const int q = cpulm_k5a_get(qr, r, e), j = e / 32, l = e % 32;
        qs[32 * (j / 2) + l] |= (uint8_t)((q & 0xF) << (4 * (j % 2)));
        qh[l] |= (uint8_t)((q >> 4) << j);
    }
}

#endif

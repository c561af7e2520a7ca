/* k6_layout.h: the aarch64 packed layout of Q6_K quants, the per-arch hook of the 16-row
 * layout (kernels.h). Plain C: used by the loader (model/repack.c), the generic oracle
 * (generic/gemm_k.c) and the ARM GEMM (x16_ksdot.h), in aarch64 builds only.
 *
 * Why: the shared layout keeps Q6_K's ql / qh fields, so the SDOT tile spent ~3.75 vector
 * ops per 16 weights to rebuild q - 32 from two fields. Here a group super-block's first
 * 3072 bytes (where ql and qh were; scales and d stay where they are) hold each quant q
 * (0..63) as the signed byte v = 4 (q - 32) = 4q - 128 = (q << 2) ^ 0x80, whose low two
 * bits are 0, so three bytes carry four quants: 4 weight vectors come out of 3 loads and 6
 * ops (3 AND, 2 SLI, 1 SHL), and the factor 4 leaves exactly through SCVTF #2.
 *
 * Sub-block gi (elements 16gi..16gi+15) takes chunks 3gi, 3gi + 1, 3gi + 2 (64 bytes
 * each); in chunk 3gi + k, byte 4r + b of row r holds, for element e_k = 16gi + 4k + b
 * and e_3 = 16gi + 12 + b:
 *   bits 7..2: bits 7..2 of v(e_k);   bits 1..0: bits (7 - 2k)..(6 - 2k) of v(e_3).
 * A 16-byte slice (4 rows, the SDOT layout of x16_ksdot.h) of chunk 3gi + k, masked with
 * 0xFC, is the rows' v of elements 16gi + 4k .. +3; the low bit pairs of the three chunks,
 * gathered, are those of elements 16gi + 12 .. +15. */
#ifndef CPULM_KERNELS_ARM_K6_LAYOUT_H
#define CPULM_KERNELS_ARM_K6_LAYOUT_H

#include <stdint.h>
#include <string.h>

#define CPULM_K6A_QBYTES 3072 /* a group super-block's quant bytes (16 rows x 192) */

/* Quant e (0..255, element order) of a Q6_K block's ql (128 bytes) and qh (64), 0..63:
 * element 128c + 32s + l is nibble s >> 1 of ql[64c + 32(s & 1) + l] and bits 2s, 2s + 1
 * of qh[32c + l] (cpulm_block_q6_K). */
static inline int cpulm_k6_quant(const uint8_t *ql, const uint8_t *qh, int e) {
    const int c = e / 128, s = e % 128 / 32, l = e % 32;
    const int lo = ql[64 * c + 32 * (s & 1) + l] >> (4 * (s >> 1)) & 0xF;
    return lo | (qh[32 * c + l] >> (2 * s) & 3) << 4;
}

/* The quant (0..63) of element e of row r (0..15) from a group super-block's packed quants qr. */
static inline int cpulm_k6a_get(const uint8_t *qr, int r, int e) {
    const int gi = e / 16, k = e % 16 / 4, b = e % 4;
    const uint8_t *p = qr + 64 * 3 * gi + 4 * r + b;
    const int v = k < 3 ? p[64 * k] & 0xFC : (p[0] & 3) << 6 | (p[64] & 3) << 4 | (p[128] & 3) << 2;
    return (v ^ 0x80) >> 2;
}

/* Row r's quants of one Q6_K block (ql, qh: the block's fields) into qr, its 4 bytes of
 * every chunk. */
static inline void cpulm_k6a_put_row(uint8_t *qr, int r, const uint8_t *ql, const uint8_t *qh) {
    for (int gi = 0; gi < 16; gi++)
        for (int b = 0; b < 4; b++) {
            const int v3 = (cpulm_k6_quant(ql, qh, 16 * gi + 12 + b) << 2) ^ 0x80;
            for (int k = 0; k < 3; k++) {
                const int v = (cpulm_k6_quant(ql, qh, 16 * gi + 4 * k + b) << 2) ^ 0x80;
                qr[64 * (3 * gi + k) + 4 * r + b] = (uint8_t)((v & 0xFC) | (v3 >> (6 - 2 * k) & 3));
            }
        }
}

/* Row r's ql and qh fields rebuilt from qr (the inverse of cpulm_k6a_put_row). */
static inline void cpulm_k6a_get_row(const uint8_t *qr, int r, uint8_t *ql, uint8_t *qh) {
    memset(ql, 0, 128);
    memset(qh, 0, 64);
    for (int e = 0; e < 256; e++) {
        const int q = cpulm_k6a_get(qr, r, e), c = e / 128, s = e % 128 / 32, l = e % 32;
        ql[64 * c + 32 * (s & 1) + l] |= (uint8_t)((q & 0xF) << (4 * (s >> 1)));
        qh[32 * c + l] |= (uint8_t)((q >> 4) << (2 * s));
    }
}

#endif

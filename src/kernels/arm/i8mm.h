/* i8mm.h: 2x2-tile dot products of the i8mm level (SMMLA), outside the kernel table.
 *
 * The table's vec_dot is one weight row x one activation row; SMMLA multiplies a 2x8 by
 * an 8x2 int8 matrix, so it only pays off on two weight rows x two activation rows (a
 * GEMM micro-tile, prompt processing). Until the table has a tile entry, these are
 * reachable only by name: callers must first check that dispatch offers the "i8mm" level
 * (cpulm_kernels_levels), since they execute SMMLA unconditionally.
 *
 * Contract (proposed as a table entry, see the ARM report): n is a multiple of 32;
 * x points at weight row 0, row 1 is bx bytes further; y at activation row 0 (Q8_0), row 1
 * is by bytes further; s[r * bs + c] = dot(weight row r, activation row c) for r, c in
 * {0, 1}. Pointers need only 2-byte alignment, like every table entry.
 */
#ifndef CPULM_KERNELS_ARM_I8MM_H
#define CPULM_KERNELS_ARM_I8MM_H

#include <stddef.h>
#include <stdint.h>

typedef void (*cpulm_vec_dot_2x2_fn)(int64_t n, float *s, size_t bs, const void *x, size_t bx,
                                     const void *y, size_t by);

void cpulm_i8mm_vec_dot_2x2_q8_0_q8_0(int64_t n, float *s, size_t bs, const void *x, size_t bx,
                                      const void *y, size_t by);
void cpulm_i8mm_vec_dot_2x2_q4_0_q8_0(int64_t n, float *s, size_t bs, const void *x, size_t bx,
                                      const void *y, size_t by);

#endif

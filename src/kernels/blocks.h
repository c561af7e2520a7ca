/* blocks.h: from a run-time (rows, vectors) pair to a register-blocked kernel body
 * instantiated with both as compile-time constants (the SIMD levels' P.V blocks, whose
 * accumulator arrays must be fully unrolled into registers). A kernel lists its shapes per
 * row count: CPULM_BLOCKS_UPTO<V>(R, CASE) adds the cases (R, 1..V), CASE(R, V) being a
 * statement; a pair not listed does nothing (callers pass only listed ones). */
#ifndef CPULM_KERNELS_BLOCKS_H
#define CPULM_KERNELS_BLOCKS_H

#define CPULM_BLOCK_CASE(R, V, CASE) \
    case (R)*16 + (V):               \
        CASE(R, V);                  \
        break;
#define CPULM_BLOCKS_UPTO1(R, CASE) CPULM_BLOCK_CASE(R, 1, CASE)
#define CPULM_BLOCKS_UPTO2(R, CASE) CPULM_BLOCKS_UPTO1(R, CASE) CPULM_BLOCK_CASE(R, 2, CASE)
#define CPULM_BLOCKS_UPTO3(R, CASE) CPULM_BLOCKS_UPTO2(R, CASE) CPULM_BLOCK_CASE(R, 3, CASE)
#define CPULM_BLOCKS_UPTO4(R, CASE) CPULM_BLOCKS_UPTO3(R, CASE) CPULM_BLOCK_CASE(R, 4, CASE)
#define CPULM_BLOCKS_UPTO8(R, CASE) \
    CPULM_BLOCKS_UPTO4(R, CASE)     \
    CPULM_BLOCK_CASE(R, 5, CASE)    \
    CPULM_BLOCK_CASE(R, 6, CASE) CPULM_BLOCK_CASE(R, 7, CASE) CPULM_BLOCK_CASE(R, 8, CASE)
/* every (R, V) with R and V in 1..4 */
#define CPULM_BLOCKS_4X4(CASE)  \
    CPULM_BLOCKS_UPTO4(4, CASE) \
    CPULM_BLOCKS_UPTO4(3, CASE) CPULM_BLOCKS_UPTO4(2, CASE) CPULM_BLOCKS_UPTO4(1, CASE)
/* switch ((rows, vecs)) over the listed CASES */
#define CPULM_BLOCKS_SWITCH(rows, vecs, CASES) \
    switch ((rows)*16 + (vecs)) { CASES default : break; }

#endif

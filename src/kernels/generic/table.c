/* table.c: cpulm_kernels_generic, the complete portable-C kernel table.
 * Every computable weight type has a vec_dot; every type with a reference quantizer or
 * dequantizer has from_float / to_float (those are quant.c's reference routines: the
 * generic level is, by definition, the reference). Every plain op of CPULM_KERNEL_OPS is
 * cpulm_generic_<name>, filled in from the list. A test checks there is no NULL entry for
 * computable types or plain ops. */
#include "generic.h"
#include "kernels/kernels.h"

#define D(t) [CPULM_DTYPE_##t]

const cpulm_kernels cpulm_kernels_generic = {
    .name = "generic",
    .vec_dot =
        {
            D(F32) = cpulm_generic_vec_dot_f32,
            D(F16) = cpulm_generic_vec_dot_f16,
            D(BF16) = cpulm_generic_vec_dot_bf16,
            D(Q8_0) = cpulm_generic_vec_dot_q8_0_q8_0,
            D(Q4_0) = cpulm_generic_vec_dot_q4_0_q8_0,
            D(Q4_1) = cpulm_generic_vec_dot_q4_1_q8_1,
            D(Q5_0) = cpulm_generic_vec_dot_q5_0_q8_0,
            D(Q5_1) = cpulm_generic_vec_dot_q5_1_q8_1,
            D(Q4_K) = cpulm_generic_vec_dot_q4_K_q8_K,
            D(Q5_K) = cpulm_generic_vec_dot_q5_K_q8_K,
            D(Q6_K) = cpulm_generic_vec_dot_q6_K_q8_K,
            D(MXFP4) = cpulm_generic_vec_dot_mxfp4_q8_0,
        },
    .from_float =
        {
            D(F32) = cpulm_quantize_row_f32_ref,
            D(F16) = cpulm_quantize_row_f16_ref,
            D(BF16) = cpulm_quantize_row_bf16_ref,
            D(Q4_0) = cpulm_quantize_row_q4_0_ref,
            D(Q4_1) = cpulm_quantize_row_q4_1_ref,
            D(Q5_0) = cpulm_quantize_row_q5_0_ref,
            D(Q5_1) = cpulm_quantize_row_q5_1_ref,
            D(Q8_0) = cpulm_quantize_row_q8_0_ref,
            D(Q8_1) = cpulm_quantize_row_q8_1_ref,
            D(Q8_K) = cpulm_quantize_row_q8_K_ref,
            D(Q4_K) = cpulm_quantize_row_q4_K_ref,
            D(Q5_K) = cpulm_quantize_row_q5_K_ref,
            D(Q6_K) = cpulm_quantize_row_q6_K_ref,
            D(MXFP4) = cpulm_quantize_row_mxfp4_ref,
        },
    .to_float =
        {
            D(F32) = cpulm_dequantize_row_f32_ref,
            D(F16) = cpulm_dequantize_row_f16_ref,
            D(BF16) = cpulm_dequantize_row_bf16_ref,
            D(Q4_0) = cpulm_dequantize_row_q4_0_ref,
            D(Q4_1) = cpulm_dequantize_row_q4_1_ref,
            D(Q5_0) = cpulm_dequantize_row_q5_0_ref,
            D(Q5_1) = cpulm_dequantize_row_q5_1_ref,
            D(Q8_0) = cpulm_dequantize_row_q8_0_ref,
            D(Q8_1) = cpulm_dequantize_row_q8_1_ref,
            D(Q8_K) = cpulm_dequantize_row_q8_K_ref,
            D(Q2_K) = cpulm_dequantize_row_q2_K_ref,
            D(Q3_K) = cpulm_dequantize_row_q3_K_ref,
            D(Q4_K) = cpulm_dequantize_row_q4_K_ref,
            D(Q5_K) = cpulm_dequantize_row_q5_K_ref,
            D(Q6_K) = cpulm_dequantize_row_q6_K_ref,
            D(MXFP4) = cpulm_dequantize_row_mxfp4_ref,
        },
#define GENERIC_OP(ID, name, ret, params, group) .name = cpulm_generic_##name,
    CPULM_KERNEL_OPS(GENERIC_OP)
#undef GENERIC_OP
        .gemm_x16 =
        {
            D(Q4_0) = cpulm_generic_gemm_q4_0_x16,
            D(Q8_0) = cpulm_generic_gemm_q8_0_x16,
            D(Q4_K) = cpulm_generic_gemm_q4_K_x16,
            D(Q5_K) = cpulm_generic_gemm_q5_K_x16,
            D(Q6_K) = cpulm_generic_gemm_q6_K_x16,
            D(MXFP4) = cpulm_generic_gemm_mxfp4_x16,
        },
    .gemm_rows = {D(F32) = cpulm_generic_gemm_rows_f32, D(F16) = cpulm_generic_gemm_rows_f16},
};

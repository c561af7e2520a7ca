/* test_base.c: fp16/bf16 conversions and status helpers. */
#include <string.h>

#include "base/fp16.h"
#include "base/status.h"
#include "test.h"

TEST(base_fp16_roundtrip_all_halves) {
    /* every finite half converts to float and back to itself */
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        float f = cpulm_fp16_to_f32((uint16_t)h);
        if (cpulm_f32_to_fp16(f) != h) {
            CHECK_EQ_INT(t, cpulm_f32_to_fp16(f), h);
            return;
        }
    }
}

TEST(base_fp16_rounding) {
    CHECK_EQ_INT(t, cpulm_f32_to_fp16(1.0f), 0x3c00);
    CHECK_EQ_INT(t, cpulm_f32_to_fp16(65504.0f), 0x7bff);
    CHECK_EQ_INT(t, cpulm_f32_to_fp16(65520.0f), 0x7c00);           /* rounds up to inf */
    CHECK_EQ_INT(t, cpulm_f32_to_fp16(1.0f + 1.0f / 2048), 0x3c00); /* tie to even */
    CHECK_EQ_INT(t, cpulm_f32_to_fp16(1.0f + 3.0f / 2048), 0x3c02);
    CHECK_EQ_INT(t, cpulm_f32_to_fp16(5.9604645e-08f), 0x0001); /* smallest subnormal */
    CHECK_EQ_INT(t, cpulm_f32_to_fp16(-0.0f), 0x8000);
    CHECK(t, cpulm_fp16_to_f32(0x7e00) != cpulm_fp16_to_f32(0x7e00)); /* NaN */
}

TEST(base_bf16_rounding) {
    CHECK_EQ_INT(t, cpulm_f32_to_bf16(1.0f), 0x3f80);
    CHECK(t, cpulm_bf16_to_f32(cpulm_f32_to_bf16(3.140625f)) == 3.140625f);
    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: rounds to even (1) */
    CHECK_EQ_INT(t, cpulm_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
}

TEST(base_errf_formats) {
    cpulm_error e;
    memset(&e, 0, sizeof e);
    cpulm_status s = cpulm_errf(&e, CPULM_ERR_FORMAT, "key '%s': bad", "x");
    CHECK_EQ_INT(t, s, CPULM_ERR_FORMAT);
    CHECK_EQ_INT(t, e.code, CPULM_ERR_FORMAT);
    CHECK(t, strcmp(e.msg, "key 'x': bad") == 0);
    CHECK(t, cpulm_errf(NULL, CPULM_ERR_IO, "x") == CPULM_ERR_IO);
    CHECK(t, strcmp(cpulm_status_str(CPULM_ERR_KV_FULL), "kv cache full") == 0);
}

/* utf8.c: UTF-8 coding and Unicode class lookups for the tokenizers (see utf8.h). */
#include "tokenizer/utf8.h"

unsigned cpulm_unicode_flags(uint32_t cp) {
    if (cp < 128) return cpulm_unicode_ascii[cp];
    if (cp > 0x10FFFF) return CPULM_UC_CONTROL;
    /* Last range whose start <= cp; entry 0 starts at 0, so lo stays valid. */
    int32_t lo = 0, hi = cpulm_unicode_n_ranges - 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo + 1) / 2;
        if ((cpulm_unicode_ranges[mid] >> 8) <= cp)
            lo = mid;
        else
            hi = mid - 1;
    }
    return cpulm_unicode_ranges[lo] & 0xFFu;
}

int cpulm_unicode_is_dsllm_letter(uint32_t cp) {
    int32_t lo = 0, hi = cpulm_unicode_n_dsllm_letters - 1;
    while (lo <= hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (cp < cpulm_unicode_dsllm_letters[mid][0])
            hi = mid - 1;
        else if (cp > cpulm_unicode_dsllm_letters[mid][1])
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

int cpulm_utf8_lead_len(unsigned char c) {
    static const int8_t by_high_nibble[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return by_high_nibble[c >> 4];
}

static int is_cont(unsigned char c) {
    return (c & 0xC0) == 0x80;
}

uint32_t cpulm_utf8_decode(const char *s, size_t n, size_t *i) {
    const unsigned char *p = (const unsigned char *)s + *i;
    size_t left = n - *i;
    unsigned char c = p[0];
    uint32_t cp;
    int len;
    if (c < 0x80) {
        *i += 1;
        return c;
    }
    if ((c & 0xE0) == 0xC0) {
        len = 2;
        cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3;
        cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4;
        cp = c & 0x07;
    } else {
        *i += 1; /* stray continuation byte or 0xF8..0xFF */
        return CPULM_UNICODE_REPLACEMENT;
    }
    if ((size_t)len > left) {
        *i += 1;
        return CPULM_UNICODE_REPLACEMENT;
    }
    for (int k = 1; k < len; k++) {
        if (!is_cont(p[k])) {
            *i += 1;
            return CPULM_UNICODE_REPLACEMENT;
        }
        cp = cp << 6 | (p[k] & 0x3Fu);
    }
    if (cp > 0x10FFFF) { /* cannot be re-encoded; treat like any malformed byte */
        *i += 1;
        return CPULM_UNICODE_REPLACEMENT;
    }
    *i += (size_t)len;
    return cp;
}

int cpulm_utf8_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | cp >> 6);
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

int cpulm_utf8_strict_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

int cpulm_utf8_strict_next_ok(const unsigned char *s, int k, unsigned char b) {
    if (!is_cont(b)) return 0;
    if (k != 1) return 1;
    /* The second byte carries the range restrictions (Unicode Table 3-7). */
    switch (s[0]) {
    case 0xE0: return b >= 0xA0;
    case 0xED: return b <= 0x9F;
    case 0xF0: return b >= 0x90;
    case 0xF4: return b <= 0x8F;
    default: return 1;
    }
}

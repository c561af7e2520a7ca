/* fuzz_json.c: fuzz target for the JSON reader and writer (libFuzzer entry point; without
 * libFuzzer it links with tests/fuzz/fuzz_main.c, which replays the files of corpus/json).
 * Invariants checked beyond "no crash, no sanitizer report":
 *   - any accepted document written back out parses again and writes the same bytes
 *     (compact and pretty forms);
 *   - quoting arbitrary bytes always yields a string the reader accepts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "base/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Writes d's root; returns the owned text or NULL on failure. */
static char *write_doc(const cpulm_json_doc *d, int flags, int indent, size_t *len) {
    cpulm_buf b;
    cpulm_json_writer w;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer_init(&w, &b, flags, indent);
    cpulm_json_write_value(&w, cpulm_json_root(d));
    if (cpulm_json_writer_status(&w) != CPULM_OK) {
        cpulm_buf_release(&b);
        return NULL;
    }
    return cpulm_buf_detach(&b, len);
}

static void check_roundtrip(const cpulm_json_doc *d, int flags, int indent) {
    size_t n1 = 0, n2 = 0;
    char *s1 = write_doc(d, flags, indent, &n1);
    if (!s1) abort();
    cpulm_json_limits lim = cpulm_json_default_limits();
    lim.max_depth = 1000;
    cpulm_json_doc *d2 = NULL;
    if (cpulm_json_parse(s1, n1, &lim, &d2, NULL, NULL) != CPULM_OK) abort();
    char *s2 = write_doc(d2, flags, indent, &n2);
    if (!s2 || n1 != n2 || memcmp(s1, s2, n1) != 0) abort();
    free(s1);
    free(s2);
    cpulm_json_free(d2);
}

static void check_quote(const uint8_t *data, size_t size, int flags) {
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    cpulm_json_quote(&b, (const char *)data, size, flags);
    cpulm_json_doc *d = NULL;
    if (cpulm_buf_status(&b) != CPULM_OK ||
        cpulm_json_parse(b.data, b.len, NULL, &d, NULL, NULL) != CPULM_OK ||
        cpulm_json_root(d)->type != CPULM_JSON_STRING)
        abort();
    cpulm_json_free(d);
    cpulm_buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    cpulm_json_doc *d = NULL;
    cpulm_error err;
    if (cpulm_json_parse((const char *)data, size, NULL, &d, NULL, &err) == CPULM_OK) {
        check_roundtrip(d, 0, 0);
        check_roundtrip(d, CPULM_JSON_ASCII | CPULM_JSON_SPACED, 0);
        check_roundtrip(d, 0, 2);
        cpulm_json_free(d);
    }
    if (size < 4096) {
        check_quote(data, size, 0);
        check_quote(data, size, CPULM_JSON_ASCII);
    }
    return 0;
}

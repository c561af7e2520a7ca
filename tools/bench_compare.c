/* bench_compare.c: `cpulm bench --compare A B`: reads two bench outputs (a JSON array, one
 * JSON object, or JSONL; cpulm's or llama-bench's) and prints a side-by-side markdown table
 * of avg_ts with the ratio B/A. Rows match on test name and configuration. */
#include <stdlib.h>
#include <string.h>

#include "tools_api.h"
#include "bench.h"

typedef struct cmp_row {
    char key[160]; /* test | threads | batch | kv | npl */
    char test[64];
    const cpulm_json *obj;
    double ts, sd;
} cmp_row;

typedef struct cmp_file {
    cpulm_json_doc **docs;
    int n_docs;
    cmp_row *rows;
    int n_rows;
    const cpulm_json *first;
} cmp_file;

static int num_field(const cpulm_json *o, const char *k) {
    return (int)cpulm_json_num(cpulm_json_get(o, k), 0);
}

/* Test name: ours when present, else llama-bench's convention from n_prompt / n_gen. */
static void row_test(const cpulm_json *o, char *buf, size_t cap) {
    const char *t = cpulm_json_str(cpulm_json_get(o, "test"));
    int np = num_field(o, "n_prompt"), ng = num_field(o, "n_gen"), nd = num_field(o, "n_depth");
    if (t)
        snprintf(buf, cap, "%s", t);
    else if (np && ng)
        snprintf(buf, cap, "pp%d+tg%d", np, ng);
    else if (np)
        snprintf(buf, cap, "pp%d", np);
    else
        snprintf(buf, cap, "tg%d", ng);
    size_t len = strlen(buf);
    if (!t && nd > 0 && len < cap) snprintf(buf + len, cap - len, " @ d%d", nd);
}

static int add_row(cmp_file *f, const cpulm_json *o) {
    if (!o || o->type != CPULM_JSON_OBJECT) return 0;
    cmp_row *nr = realloc(f->rows, sizeof(cmp_row) * (size_t)(f->n_rows + 1));
    if (!nr) return -1;
    f->rows = nr;
    cmp_row *r = &f->rows[f->n_rows++];
    const char *tk = cpulm_json_str(cpulm_json_get(o, "type_k"));
    row_test(o, r->test, sizeof r->test);
    snprintf(r->key, sizeof r->key, "%s|t%d|b%d/%d|%s|npl%d", r->test, num_field(o, "n_threads"),
             num_field(o, "n_batch"), num_field(o, "n_ubatch"), tk ? tk : "f16",
             num_field(o, "n_parallel") ? num_field(o, "n_parallel") : 1);
    r->obj = o;
    r->ts = cpulm_json_num(cpulm_json_get(o, "avg_ts"), 0);
    r->sd = cpulm_json_num(cpulm_json_get(o, "stddev_ts"), 0);
    if (!f->first) f->first = o;
    return 0;
}

static int add_doc(cmp_file *f, const char *text, size_t len, cpulm_error *err) {
    cpulm_json_doc *d;
    if (cpulm_json_parse(text, len, NULL, &d, NULL, err) != CPULM_OK) return -1;
    cpulm_json_doc **nd = realloc(f->docs, sizeof *nd * (size_t)(f->n_docs + 1));
    if (!nd) {
        cpulm_json_free(d);
        return -1;
    }
    f->docs = nd;
    f->docs[f->n_docs++] = d;
    const cpulm_json *root = cpulm_json_root(d);
    if (root->type != CPULM_JSON_ARRAY) return add_row(f, root);
    for (size_t i = 0; i < cpulm_json_len(root); i++)
        if (add_row(f, cpulm_json_at(root, i))) return -1;
    return 0;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    cpulm_buf b;
    cpulm_buf_init(&b, 0);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        cpulm_buf_append(&b, chunk, n);
    int bad = ferror(f) || cpulm_buf_status(&b) != CPULM_OK;
    fclose(f);
    char *s = bad ? NULL : cpulm_buf_detach(&b, len);
    cpulm_buf_release(&b);
    return s;
}

/* A whole JSON document first; if that fails, one document per non-empty line (JSONL). */
static int load(cmp_file *f, const char *path) {
    size_t len;
    char *text = slurp(path, &len);
    if (!text) {
        fprintf(stderr, "cpulm bench: cannot read %s\n", path);
        return -1;
    }
    cpulm_error err = {0};
    int rc = add_doc(f, text, len, &err);
    if (rc) { /* not one document: JSONL */
        rc = 0;
        for (char *line = text; !rc && line < text + len;) {
            char *nl = memchr(line, '\n', (size_t)(text + len - line));
            size_t n = nl ? (size_t)(nl - line) : (size_t)(text + len - line);
            if (strspn(line, " \t\r") < n) rc = add_doc(f, line, n, &err);
            line += n + 1;
        }
    }
    free(text);
    if (rc || !f->n_rows)
        fprintf(stderr, "cpulm bench: %s: %s\n", path, rc ? err.msg : "no result rows");
    return rc || !f->n_rows ? -1 : 0;
}

static void release(cmp_file *f) {
    for (int i = 0; i < f->n_docs; i++)
        cpulm_json_free(f->docs[i]);
    free(f->docs);
    free(f->rows);
}

static const cmp_row *find(const cmp_file *f, const char *key) {
    for (int i = 0; i < f->n_rows; i++)
        if (!strcmp(f->rows[i].key, key)) return &f->rows[i];
    return NULL;
}

static void describe(FILE *out, const char *tag, const char *path, const cmp_file *f) {
    const char *s;
    fprintf(out, "%s: %s", tag, path);
    if ((s = cpulm_json_str(cpulm_json_get(f->first, "model_type")))) fprintf(out, " | %s", s);
    if ((s = cpulm_json_str(cpulm_json_get(f->first, "cpu_info")))) fprintf(out, " | %s", s);
    if ((s = cpulm_json_str(cpulm_json_get(f->first, "kernel_level")))) fprintf(out, " | %s", s);
    if ((s = cpulm_json_str(cpulm_json_get(f->first, "build_commit")))) fprintf(out, " | %s", s);
    fputc('\n', out);
}

static void print_row(FILE *out, const cmp_row *a, const cmp_row *b) {
    const cmp_row *r = a ? a : b;
    const cpulm_json *o = r->obj;
    const char *tk = cpulm_json_str(cpulm_json_get(o, "type_k"));
    fprintf(out, "| %s | %d | %d/%d | %s |", r->test, num_field(o, "n_threads"),
            num_field(o, "n_batch"), num_field(o, "n_ubatch"), tk ? tk : "f16");
    if (a)
        fprintf(out, " %.2f ± %.2f |", a->ts, a->sd);
    else
        fprintf(out, " - |");
    if (b)
        fprintf(out, " %.2f ± %.2f |", b->ts, b->sd);
    else
        fprintf(out, " - |");
    if (a && b && a->ts > 0)
        fprintf(out, " %.3f |\n", b->ts / a->ts);
    else
        fprintf(out, " - |\n");
}

int bench_compare(FILE *out, const char *path_a, const char *path_b) {
    cmp_file fa = {0}, fb = {0};
    int rc = -1;
    if (load(&fa, path_a) || load(&fb, path_b)) goto done;
    describe(out, "A", path_a, &fa);
    describe(out, "B", path_b, &fb);
    fprintf(out, "\n| test | threads | n_batch/n_ubatch | type_k | A t/s | B t/s | B/A |\n"
                 "| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
    for (int i = 0; i < fa.n_rows; i++)
        print_row(out, &fa.rows[i], find(&fb, fa.rows[i].key));
    for (int i = 0; i < fb.n_rows; i++)
        if (!find(&fa, fb.rows[i].key)) print_row(out, NULL, &fb.rows[i]);
    rc = 0;
done:
    release(&fa);
    release(&fb);
    return rc;
}

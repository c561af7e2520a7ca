/* test_qplan.c: per-tensor type choice of `cpulm quantize` (src/quantize_plan.c).
 * The main oracle is llama.cpp itself: its quantizer made tiny-*-{q4_k_m,q6_k,q8_0,q4_0}.gguf
 * from tiny-*-f32.gguf, so the plan for the f32 file must list the same tensors in the same
 * order with the same types. The other tests check llama-quantize's documented rules
 * (Q4_K_M "uses Q6_K for half of the attention.wv and feed_forward.w2 tensors"; row-length
 * fallbacks; tied embeddings) on synthetic tensor lists. */
#include <stdint.h>
#include <string.h>

#include "base/mmap.h"
#include "format/gguf.h"
#include "format/quant.h"
#include "toolkit/quantize_plan.h"
#include "test.h"

typedef struct mfile {
    cpulm_mmap map;
    cpulm_gguf g;
    cpulm_qplan_tensor *t; /* with NUL-terminated copies of the names */
    char (*names)[64];
} mfile;

static int mfile_open(mfile *f, const char *path) {
    memset(f, 0, sizeof *f);
    if (!path || cpulm_mmap_open(&f->map, path, NULL) != CPULM_OK) return 0;
    if (cpulm_gguf_parse(&f->g, f->map.data, f->map.size, NULL) != CPULM_OK) return 0;
    size_t n = (size_t)f->g.n_tensors;
    f->t = calloc(n + 1, sizeof *f->t);
    f->names = calloc(n + 1, sizeof *f->names);
    if (!f->t || !f->names) return 0;
    for (size_t i = 0; i < n; i++) {
        const cpulm_gguf_tensor *gt = &f->g.tensors[i];
        memcpy(f->names[i], gt->name.ptr, (size_t)gt->name.len);
        f->t[i] = (cpulm_qplan_tensor){.name = f->names[i], .type = gt->type, .n_dims = gt->n_dims};
        memcpy(f->t[i].ne, gt->ne, sizeof gt->ne);
    }
    return 1;
}

static void mfile_close(mfile *f) {
    free(f->t);
    free(f->names);
    cpulm_gguf_release(&f->g);
    cpulm_mmap_close(&f->map);
}

/* Plan for src with the preset, compared tensor by tensor with the llama.cpp-made ref. */
static void check_against(test_ctx *t, const char *src_rel, const char *ref_rel, const char *preset,
                          bool pure) {
    mfile src, ref;
    int ok_src = mfile_open(&src, test_shared_path(src_rel));
    int ok_ref = mfile_open(&ref, test_shared_path(ref_rel));
    if (!ok_src || !ok_ref) {
        mfile_close(&src);
        mfile_close(&ref);
        t->skip_reason = "tiny models not found";
        return;
    }
    cpulm_qplan_model m;
    CHECK_EQ_INT(t, cpulm_qplan_model_from_gguf(&src.g, &m, NULL), CPULM_OK);
    cpulm_qplan_params p = cpulm_qplan_default_params(cpulm_qplan_preset_find(preset));
    p.pure = pure;
    int64_t n = (int64_t)src.g.n_tensors;
    cpulm_qplan_entry *e = calloc((size_t)n, sizeof *e);
    CHECK(t, e && p.preset);
    CHECK_EQ_INT(t, ref.g.n_tensors, n);
    if (e && p.preset && cpulm_qplan_build(&p, &m, src.t, n, e, NULL) == CPULM_OK &&
        (int64_t)ref.g.n_tensors == n) {
        for (int64_t i = 0; i < n; i++) {
            const cpulm_qplan_tensor *in = &src.t[e[i].src];
            if (strcmp(in->name, ref.names[i]) != 0 || e[i].type != ref.t[i].type) {
                fprintf(stderr, "  %s #%lld: plan %s %s, llama.cpp %s %s\n", preset, (long long)i,
                        in->name, cpulm_dtype_name(e[i].type), ref.names[i],
                        cpulm_dtype_name(ref.t[i].type));
                t->n_fail++;
            }
            CHECK(t, e[i].convert == (e[i].type != in->type));
        }
    } else {
        t->n_fail++;
    }
    int64_t ft = -1;
    cpulm_gguf_get_i64(&ref.g, "general.file_type", &ft, NULL);
    CHECK_EQ_INT(t, ft, p.preset ? (int64_t)p.preset->ftype : -2);
    free(e);
    mfile_close(&src);
    mfile_close(&ref);
}

TEST(qplan_matches_llamacpp_files) {
    static const char *models[] = {"tiny-llama", "tiny-llama3", "tiny-qwen2"};
    static const struct {
        const char *suffix, *preset;
        bool pure;
    } cases[] = {{"q4_k_m", "Q4_K_M", false},
                 {"q6_k", "Q6_K", false},
                 {"q8_0", "Q8_0", false},
                 {"q4_0", "Q4_0", true}}; /* the Q4_0 files were made with --pure */
    char src[128], ref[128];
    for (size_t m = 0; m < 3; m++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            snprintf(src, sizeof src, "testdata/models/%s-f32.gguf", models[m]);
            snprintf(ref, sizeof ref, "testdata/models/%s-%s.gguf", models[m], cases[c].suffix);
            check_against(t, src, ref, cases[c].preset, cases[c].pure);
            if (t->skip_reason) return;
        }
    }
}

/* The 2026 files: qwen3, and 3-D expert tensors (qwen3moe with 8 experts, where llama.cpp
 * bumps attn_k/attn_v to Q8_0 in its mixes; Mixtral-style llama with 4). Their Q4_0 and Q6_K
 * files were made with --pure (every 2-D and 3-D tensor in that type). */
TEST(qplan_matches_llamacpp_moe_files) {
    static const char *models[] = {"tiny-qwen3", "tiny-qwen3moe", "tiny-mixtral"};
    static const struct {
        const char *suffix, *preset;
        bool pure;
    } cases[] = {{"q4_k_m", "Q4_K_M", false},
                 {"q6_k", "Q6_K", true},
                 {"q8_0", "Q8_0", false},
                 {"q4_0", "Q4_0", true}};
    char src[128], ref[128];
    for (size_t m = 0; m < 3; m++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            snprintf(src, sizeof src, "testdata/models/%s-f32.gguf", models[m]);
            snprintf(ref, sizeof ref, "testdata/models/%s-%s.gguf", models[m], cases[c].suffix);
            check_against(t, src, ref, cases[c].preset, cases[c].pure);
            if (t->skip_reason) return;
        }
    }
}

/* ---- synthetic models ---- */

typedef struct synth {
    cpulm_qplan_model m;
    cpulm_qplan_tensor t[1024];
    char names[1024][64];
    int64_t n;
} synth;

static void add(synth *s, const char *name, int n_dims, int64_t ne0, int64_t ne1) {
    snprintf(s->names[s->n], 64, "%s", name);
    s->t[s->n] = (cpulm_qplan_tensor){.name = s->names[s->n],
                                      .type = CPULM_DTYPE_F32,
                                      .n_dims = n_dims,
                                      .ne = {ne0, n_dims > 1 ? ne1 : 1, 1, 1}};
    s->n++;
}

/* A llama-shaped model, tensors listed in the converter's order (not the output order). */
static void make_llama(synth *s, int n_layer, int64_t d, int64_t ff, bool with_output) {
    memset(s, 0, sizeof *s);
    snprintf(s->m.arch, sizeof s->m.arch, "llama");
    s->m.n_layer = n_layer;
    s->m.n_head = 32;
    s->m.n_head_kv = 8;
    add(s, "token_embd.weight", 2, d, 32000);
    char nm[64];
    static const char *sq[] = {"attn_q", "attn_k", "attn_v", "attn_output"};
    for (int l = 0; l < n_layer; l++) {
        snprintf(nm, sizeof nm, "blk.%d.attn_norm.weight", l);
        add(s, nm, 1, d, 1);
        for (int k = 0; k < 4; k++) {
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, sq[k]);
            add(s, nm, 2, d, d);
        }
        snprintf(nm, sizeof nm, "blk.%d.ffn_gate.weight", l);
        add(s, nm, 2, d, ff);
        snprintf(nm, sizeof nm, "blk.%d.ffn_down.weight", l);
        add(s, nm, 2, ff, d);
        snprintf(nm, sizeof nm, "blk.%d.ffn_up.weight", l);
        add(s, nm, 2, d, ff);
    }
    add(s, "output_norm.weight", 1, d, 1);
    if (with_output) add(s, "output.weight", 2, d, 32000);
}

static int plan(synth *s, const char *preset, cpulm_qplan_entry *e, cpulm_error *err) {
    cpulm_qplan_params p = cpulm_qplan_default_params(cpulm_qplan_preset_find(preset));
    return p.preset ? cpulm_qplan_build(&p, &s->m, s->t, s->n, e, err) : -100;
}

static const cpulm_qplan_entry *find(const synth *s, const cpulm_qplan_entry *e, const char *name) {
    for (int64_t i = 0; i < s->n; i++)
        if (!strcmp(s->t[e[i].src].name, name)) return &e[i];
    return NULL;
}

static int count_type(const synth *s, const cpulm_qplan_entry *e, const char *part, uint32_t ty) {
    int n = 0;
    for (int64_t i = 0; i < s->n; i++)
        n += strstr(s->t[e[i].src].name, part) && e[i].type == ty;
    return n;
}

static synth S;
static cpulm_qplan_entry E[1024];

TEST(qplan_k_m_half_of_attn_v_and_ffn_down) {
    make_llama(&S, 32, 4096, 11008, true);
    REQUIRE(t, plan(&S, "Q4_K_M", E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, count_type(&S, E, "attn_v.weight", CPULM_DTYPE_Q6_K), 16);
    CHECK_EQ_INT(t, count_type(&S, E, "ffn_down.weight", CPULM_DTYPE_Q6_K), 16);
    CHECK_EQ_INT(t, count_type(&S, E, "attn_v.weight", CPULM_DTYPE_Q4_K), 16);
    CHECK_EQ_INT(t, count_type(&S, E, "attn_q.weight", CPULM_DTYPE_Q4_K), 32);
    CHECK_EQ_INT(t, find(&S, E, "output.weight")->type, CPULM_DTYPE_Q6_K);
    CHECK_EQ_INT(t, find(&S, E, "token_embd.weight")->type, CPULM_DTYPE_Q4_K);
    CHECK_EQ_INT(t, find(&S, E, "blk.0.attn_norm.weight")->convert, 0);
    /* the first and last eighth of the layers always get the extra bits */
    CHECK_EQ_INT(t, find(&S, E, "blk.0.ffn_down.weight")->type, CPULM_DTYPE_Q6_K);
    CHECK_EQ_INT(t, find(&S, E, "blk.31.attn_v.weight")->type, CPULM_DTYPE_Q6_K);
    REQUIRE(t, plan(&S, "Q5_K_M", E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, count_type(&S, E, "ffn_down.weight", CPULM_DTYPE_Q6_K), 16);
    CHECK_EQ_INT(t, count_type(&S, E, "ffn_down.weight", CPULM_DTYPE_Q5_K), 16);
    /* output order: non-layer tensors by name, then layer by layer (blk.2 before blk.10) */
    CHECK(t, !strcmp(S.t[E[0].src].name, "output.weight"));
    CHECK(t, !strcmp(S.t[E[3].src].name, "blk.0.attn_k.weight"));
    CHECK(t, !strncmp(S.t[E[3 + 8 * 2].src].name, "blk.2.", 6));
}

TEST(qplan_k_s_and_uniform_presets) {
    make_llama(&S, 32, 4096, 11008, true);
    REQUIRE(t, plan(&S, "Q4_K_S", E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, count_type(&S, E, "attn_v.weight", CPULM_DTYPE_Q5_K), 4);
    CHECK_EQ_INT(t, find(&S, E, "blk.3.attn_v.weight")->type, CPULM_DTYPE_Q5_K);
    CHECK_EQ_INT(t, count_type(&S, E, "ffn_down.weight", CPULM_DTYPE_Q5_K), 4); /* 32 / 8 */
    REQUIRE(t, plan(&S, "Q5_K_S", E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, count_type(&S, E, ".weight", CPULM_DTYPE_Q5_K), 32 * 7 + 1);
    CHECK_EQ_INT(t, find(&S, E, "output.weight")->type, CPULM_DTYPE_Q6_K);
    REQUIRE(t, plan(&S, "Q8_0", E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, count_type(&S, E, ".weight", CPULM_DTYPE_Q8_0), 32 * 7 + 2);
    REQUIRE(t, plan(&S, "Q4_0", E, NULL) == CPULM_OK); /* not --pure: output gets Q6_K */
    CHECK_EQ_INT(t, find(&S, E, "output.weight")->type, CPULM_DTYPE_Q6_K);
    REQUIRE(t, plan(&S, "F16", E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, count_type(&S, E, ".weight", CPULM_DTYPE_F16), 32 * 7 + 2);
}

TEST(qplan_tied_embeddings_get_output_type) {
    make_llama(&S, 4, 4096, 11008, false);
    REQUIRE(t, plan(&S, "Q4_K_M", E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, find(&S, E, "token_embd.weight")->type, CPULM_DTYPE_Q6_K);
}

/* stories260K's shapes: dim 64, ffn 172, neither a multiple of 256. */
TEST(qplan_row_length_fallbacks) {
    make_llama(&S, 5, 64, 172, true);
    REQUIRE(t, plan(&S, "Q4_K_M", E, NULL) == CPULM_OK);
    const cpulm_qplan_entry *q = find(&S, E, "blk.2.attn_q.weight");
    CHECK_EQ_INT(t, q->wanted, CPULM_DTYPE_Q4_K);
    CHECK_EQ_INT(t, q->type, CPULM_DTYPE_Q5_0);
    /* of 5 layers, use_more_bits picks 2 ((2 - 0) % 3 == 2) and 4 (>= 7 * 5 / 8) */
    CHECK_EQ_INT(t, find(&S, E, "blk.4.attn_v.weight")->wanted, CPULM_DTYPE_Q6_K);
    CHECK_EQ_INT(t, find(&S, E, "blk.4.attn_v.weight")->type, CPULM_DTYPE_Q8_0);
    CHECK_EQ_INT(t, find(&S, E, "blk.0.attn_v.weight")->type, CPULM_DTYPE_Q5_0);
    CHECK_EQ_INT(t, find(&S, E, "blk.2.ffn_down.weight")->wanted, CPULM_DTYPE_Q6_K);
    CHECK_EQ_INT(t, find(&S, E, "blk.2.ffn_down.weight")->type, CPULM_DTYPE_F16);
    CHECK_EQ_INT(t, find(&S, E, "blk.1.ffn_down.weight")->type, CPULM_DTYPE_F16); /* 172 % 32 */
    CHECK_EQ_INT(t, find(&S, E, "output.weight")->type, CPULM_DTYPE_Q8_0);
    CHECK_EQ_INT(t, find(&S, E, "token_embd.weight")->type, CPULM_DTYPE_Q5_0);
    REQUIRE(t, plan(&S, "Q5_K_S", E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, find(&S, E, "blk.2.attn_q.weight")->type, CPULM_DTYPE_Q5_1);
    /* legacy presets have no fallback: llama.cpp refuses such a tensor, and so do we */
    cpulm_error err = {0};
    CHECK_EQ_INT(t, plan(&S, "Q8_0", E, &err), CPULM_ERR_UNSUPPORTED);
    CHECK(t, strstr(err.msg, "ffn_down.weight") && strstr(err.msg, "172"));
}

TEST(qplan_pure_and_forced_types) {
    make_llama(&S, 5, 64, 172, true);
    cpulm_qplan_params p = cpulm_qplan_default_params(cpulm_qplan_preset_find("Q4_K_M"));
    p.pure = true; /* no fallback with --pure: a 64-wide Q4_K row is an error */
    cpulm_error err = {0};
    CHECK_EQ_INT(t, cpulm_qplan_build(&p, &S.m, S.t, S.n, E, &err), CPULM_ERR_UNSUPPORTED);
    make_llama(&S, 2, 256, 768, true);
    REQUIRE(t, cpulm_qplan_build(&p, &S.m, S.t, S.n, E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, count_type(&S, E, ".weight", CPULM_DTYPE_Q4_K), 2 * 7 + 2);
    p.pure = false;
    p.output_type = CPULM_DTYPE_Q8_0;
    p.token_embd_type = CPULM_DTYPE_Q6_K;
    REQUIRE(t, cpulm_qplan_build(&p, &S.m, S.t, S.n, E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, find(&S, E, "output.weight")->type, CPULM_DTYPE_Q8_0);
    CHECK_EQ_INT(t, find(&S, E, "token_embd.weight")->type, CPULM_DTYPE_Q6_K);
    p.keep_output = true;
    REQUIRE(t, cpulm_qplan_build(&p, &S.m, S.t, S.n, E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, find(&S, E, "output.weight")->type, CPULM_DTYPE_F32);
    CHECK_EQ_INT(t, find(&S, E, "output.weight")->convert, 0);
}

TEST(qplan_what_is_never_quantized) {
    CHECK(t, cpulm_qplan_is_quantizable("blk.0.attn_q.weight", 2));
    CHECK(t, cpulm_qplan_is_quantizable("blk.0.ffn_down_exps.weight", 3));
    CHECK(t, !cpulm_qplan_is_quantizable("blk.0.attn_q.bias", 2));
    CHECK(t, !cpulm_qplan_is_quantizable("rope_freqs.weight", 1));
    CHECK(t, !cpulm_qplan_is_quantizable("blk.0.attn_norm.weight", 2));
    CHECK(t, !cpulm_qplan_is_quantizable("blk.0.ffn_gate_inp.weight", 2));
    CHECK(t, !cpulm_qplan_is_quantizable("position_embd.weight", 2));
}

TEST(qplan_70b_attn_v) {
    make_llama(&S, 80, 512, 1024, true); /* small dims; only the layer count and GQA matter */
    REQUIRE(t, plan(&S, "Q4_K_M", E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, count_type(&S, E, "attn_v.weight", CPULM_DTYPE_Q4_K), 0);
    CHECK_EQ_INT(t,
                 count_type(&S, E, "attn_v.weight", CPULM_DTYPE_Q6_K) +
                     count_type(&S, E, "attn_v.weight", CPULM_DTYPE_Q5_K),
                 80);
    S.m.n_head_kv = S.m.n_head; /* 65B (LLaMA 1) has no GQA: no bump */
    REQUIRE(t, plan(&S, "Q4_K_M", E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, count_type(&S, E, "attn_v.weight", CPULM_DTYPE_Q5_K), 0);
}

/* llama-quantize's MXFP4_MOE: expert stacks (3-D, > 1 expert) MXFP4, every other converted
 * matrix Q8_0 (output.weight and token_embd.weight too), norms and the router unchanged. */
TEST(qplan_mxfp4_moe) {
    make_llama(&S, 2, 256, 512, true);
    S.m.n_expert = 4;
    static const char *ex[] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
    char nm[64];
    for (int l = 0; l < 2; l++) {
        for (int k = 0; k < 3; k++) {
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, ex[k]);
            add(&S, nm, 3, 256, 512);
            S.t[S.n - 1].ne[2] = 4;
        }
        snprintf(nm, sizeof nm, "blk.%d.ffn_gate_inp.weight", l);
        add(&S, nm, 2, 256, 4);
    }
    snprintf(nm, sizeof nm, "blk.0.ffn_one_exps.weight"); /* a stack of one expert: Q8_0 */
    add(&S, nm, 3, 256, 512);
    REQUIRE(t, plan(&S, "MXFP4_MOE", E, NULL) == CPULM_OK);
    CHECK_EQ_INT(t, count_type(&S, E, "_exps.weight", CPULM_DTYPE_MXFP4), 6);
    CHECK_EQ_INT(t, find(&S, E, "blk.0.ffn_one_exps.weight")->type, CPULM_DTYPE_Q8_0);
    CHECK_EQ_INT(t, find(&S, E, "output.weight")->type, CPULM_DTYPE_Q8_0);
    CHECK_EQ_INT(t, find(&S, E, "token_embd.weight")->type, CPULM_DTYPE_Q8_0);
    CHECK_EQ_INT(t, find(&S, E, "blk.1.attn_v.weight")->type, CPULM_DTYPE_Q8_0);
    CHECK_EQ_INT(t, find(&S, E, "blk.1.ffn_down.weight")->type, CPULM_DTYPE_Q8_0);
    CHECK_EQ_INT(t, find(&S, E, "blk.1.ffn_gate_inp.weight")->type, CPULM_DTYPE_F32);
    CHECK_EQ_INT(t, find(&S, E, "blk.1.attn_norm.weight")->type, CPULM_DTYPE_F32);
    const cpulm_qplan_preset *pr = cpulm_qplan_preset_find("mxfp4_moe");
    REQUIRE(t, pr != NULL);
    CHECK_EQ_INT(t, pr->ftype, 38);
    CHECK(t, cpulm_qplan_preset_find("38") == pr);
}

TEST(qplan_presets) {
    CHECK(t, cpulm_qplan_preset_find("q4_k_m") == cpulm_qplan_preset_find("Q4_K_M"));
    CHECK(t, cpulm_qplan_preset_find("Q4_K") == cpulm_qplan_preset_find("Q4_K_M"));
    CHECK(t, cpulm_qplan_preset_find("15") == cpulm_qplan_preset_find("Q4_K_M"));
    CHECK(t, cpulm_qplan_preset_find("Q2_K") == NULL); /* no reference quantizer */
    CHECK(t, cpulm_qplan_preset_find("Q4_K_MM") == NULL);
    CHECK(t, cpulm_qplan_preset_find("") == NULL);
    CHECK(t, cpulm_qplan_preset_find("15x") == NULL);
    for (int i = 0; cpulm_qplan_preset_at(i); i++)
        CHECK(t, cpulm_quantize_supported(cpulm_qplan_preset_at(i)->base));
}

/* spec_cli.c: the speculative decoding flags and setup shared by `run` and `bench`. */
#include <string.h>

#include "options.h"
#include "spec_cli.h"

void cli_spec_init(cli_spec *o) {
    memset(o, 0, sizeof *o);
    o->p = cpulm_spec_default_params();
}

int cli_spec_opt(int id, const cli_val *v, cli_spec *o) {
    cpulm_spec_params *p = &o->p;
    switch (id) {
    case OPT_SPEC: /* the table checked the name */
        o->kind_given = cpulm_spec_kind_parse(v->s, &p->kind) == CPULM_OK;
        break;
    case OPT_MODEL_DRAFT: o->draft_path = v->s; break;
    case OPT_DRAFT_MAX: p->draft_max = (int)v->i; break;
    case OPT_DRAFT_MIN: p->draft_min = (int)v->i; break;
    case OPT_DRAFT_P_MIN: p->p_min = (float)v->f; break;
    case OPT_SPEC_NGRAM_MAX: p->ngram_max = (int)v->i; break;
    case OPT_SPEC_NGRAM_MIN: p->ngram_min = (int)v->i; break;
    case OPT_SPEC_FIXED: p->adaptive = 0; break;
    case OPT_THREADS_DRAFT: o->n_threads_draft = (int)v->i; break;
    default: return 0;
    }
    return 1;
}

int cli_spec_check(cli *c, cli_spec *o) {
    cpulm_spec_params *p = &o->p;
    if (o->draft_path && !o->kind_given) p->kind = CPULM_SPEC_DRAFT;
    if (p->kind == CPULM_SPEC_DRAFT && !o->draft_path) {
        fprintf(stderr, "cpulm %s: --spec draft needs a draft model: -md FILE\n", c->cmd);
        return EXIT_USAGE;
    }
    if (o->draft_path && p->kind != CPULM_SPEC_DRAFT) {
        fprintf(stderr, "cpulm %s: -md gives a draft model; it does not combine with --spec %s\n",
                c->cmd, cpulm_spec_kind_name(p->kind));
        return EXIT_USAGE;
    }
    if (p->ngram_min > p->ngram_max) p->ngram_min = p->ngram_max;
    if (p->draft_min > p->draft_max) {
        fprintf(stderr, "cpulm %s: --draft-min %d is above --draft-max %d\n", c->cmd, p->draft_min,
                p->draft_max);
        return EXIT_USAGE;
    }
    return 0;
}

int cli_spec_open(const char *cmd, cli_spec *o, const cpulm_model *m, const cpulm_ctx_params *cp,
                  const cpulm_sampler_params *sp, cpulm_model **dm, cpulm_spec **s) {
    *dm = NULL;
    *s = NULL;
    if (o->p.kind == CPULM_SPEC_NONE) return 0;
    cpulm_model_info mi;
    cpulm_model_get_info(m, &mi);
    if (mi.n_layer_recurrent > 0) { /* cpulm serve turns speculation off for these models */
        fprintf(stderr,
                "cpulm %s: speculative decoding needs a model whose cache can drop rejected "
                "drafts; a hybrid model's recurrent state cannot\n",
                cmd);
        return EXIT_USAGE;
    }
    cpulm_spec_params p = o->p;
    if (p.kind == CPULM_SPEC_DRAFT) {
        if (!(*dm = cli_load_model(o->draft_path, 0, NULL)))
            return cli_load_failed_rc(o->draft_path);
        p.draft_model = *dm;
        p.draft_ctx = cli_ctx_default_params();
        p.draft_ctx.n_ctx = cp->n_ctx;
        p.draft_ctx.n_threads = o->n_threads_draft ? o->n_threads_draft : cp->n_threads;
        p.draft_ctx.n_threads_batch = cp->n_threads_batch;
        p.draft_sp = *sp;
        if (sp->seed != 0xFFFFFFFFu) /* its own stream, fixed by the seed; else the clock's */
            p.draft_sp.seed = sp->seed ^ 0x5bd1e995u;
    }
    cpulm_error err = {0};
    if (!(*s = cpulm_spec_new(&p, m, &err))) {
        fprintf(stderr, "cpulm %s: %s%s%s\n", cmd, p.kind == CPULM_SPEC_DRAFT ? o->draft_path : "",
                p.kind == CPULM_SPEC_DRAFT ? ": " : "", err.msg);
        cpulm_model_free(*dm);
        *dm = NULL;
        return err.code == CPULM_ERR_INVALID_ARG ? EXIT_USAGE : 1;
    }
    return 0;
}

void cli_spec_summary(const cpulm_spec *s, const cli_spec *o, char *buf, size_t cap) {
    cpulm_spec_stats st;
    cpulm_spec_stats_get(s, &st);
    snprintf(buf, cap,
             " | spec %s: drafted %lld, accepted %lld (%.1f%%), %.2f tokens per target pass, "
             "drafted token cost %.3f",
             cpulm_spec_kind_name(o->p.kind), (long long)st.drafted, (long long)st.accepted,
             st.drafted ? 100.0 * (double)st.accepted / (double)st.drafted : 0.0,
             st.passes ? (double)st.emitted / (double)st.passes : 0.0, st.cost);
}

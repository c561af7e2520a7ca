/* jinja.h: a Jinja2-subset template engine for chat templates (tokenizer.chat_template).
 *
 * Covers what real chat templates use, so templates never seen before still work:
 * {{ }}, {% if/elif/else %}, {% for %} (loop.*, else, inline if, tuple targets),
 * {% set %} (also namespace attributes and block form), {% macro %}, {% break/continue %},
 * {% generation %}, comments, whitespace control, trim_blocks/lstrip_blocks; Python-like
 * values (str, int, float, bool, None, list, dict), operators, slicing, tests, filters,
 * string/dict/list methods, and the globals range, namespace, dict, raise_exception and
 * strftime_now. Semantics follow Jinja2 as Hugging Face runs it (ImmutableSandboxedEnvironment
 * with trim_blocks and lstrip_blocks, loopcontrols).
 *
 * Everything is bounded: template size and nesting at parse time; output bytes, memory,
 * evaluation steps and macro recursion at render time. Malformed templates and runtime
 * errors (including raise_exception) return a status with "line N: ..." messages; nothing
 * aborts on template input.
 */
#ifndef CPULM_CHAT_JINJA_H
#define CPULM_CHAT_JINJA_H

#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"
#include "base/json.h"

typedef struct cpulm_jinja cpulm_jinja; /* parsed template; immutable, shareable by threads */

typedef struct cpulm_jinja_syntax {
    int trim_blocks;           /* drop the first newline after a block tag (HF: on) */
    int lstrip_blocks;         /* strip spaces/tabs before a block tag on its line (HF: on) */
    int keep_trailing_newline; /* Jinja's default (off) drops one trailing newline */
} cpulm_jinja_syntax;

cpulm_jinja_syntax cpulm_jinja_hf_syntax(void); /* {1, 1, 0} */

/* Parses src[0..len) (at most 1 MiB). syn NULL: Hugging Face's settings.
 * Returns CPULM_OK with *out owned (cpulm_jinja_free), CPULM_ERR_FORMAT on a syntax error
 * (err: "jinja: line N: ..."), CPULM_ERR_NOMEM. */
cpulm_status cpulm_jinja_parse(const char *src, size_t len, const cpulm_jinja_syntax *syn,
                               cpulm_jinja **out, cpulm_error *err);
void cpulm_jinja_free(cpulm_jinja *t); /* NULL is a no-op */

typedef struct cpulm_jinja_opts {
    size_t max_output;      /* bytes appended to out; default 4 MiB */
    size_t max_memory;      /* bytes of values built while rendering; default 64 MiB */
    int64_t max_steps;      /* evaluation steps (nodes, loop iterations); default 10M */
    int32_t max_call_depth; /* nested macro calls; default 64 */
    int64_t now;            /* unix time for strftime_now; < 0: the real clock */
    int now_utc;            /* format strftime_now in UTC instead of local time */
} cpulm_jinja_opts;

cpulm_jinja_opts cpulm_jinja_default_opts(void);

/* Renders t with the members of the JSON object vars as variables (vars may be NULL),
 * appending to out. opts NULL: defaults. On error out holds a partial render.
 * Returns CPULM_OK; CPULM_ERR_INVALID_ARG for template runtime errors (type errors,
 * undefined attribute access, raise_exception: its message is in err);
 * CPULM_ERR_UNSUPPORTED for filters/tests we do not implement; CPULM_ERR_TOO_SMALL when a
 * limit is hit (or out's own max_len); CPULM_ERR_NOMEM. The template is only read: concurrent
 * renders of one cpulm_jinja are safe. */
cpulm_status cpulm_jinja_render(const cpulm_jinja *t, const cpulm_json *vars,
                                const cpulm_jinja_opts *opts, cpulm_buf *out, cpulm_error *err);

#endif

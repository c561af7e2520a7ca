/* jinja_int.h: internals shared by the Jinja engine's files (not for other modules).
 *   jinja_parse.c  lexer and parser: template text -> AST (arena owned by cpulm_jinja)
 *   jinja.c        values, scopes and evaluation of the AST
 *   jinja_lib.c    filters, tests, methods and global functions
 */
#ifndef CPULM_CHAT_JINJA_INT_H
#define CPULM_CHAT_JINJA_INT_H

#include "chat/jinja.h"

/* ---- arena: bump allocation, freed at once; a limit turns runaway templates into errors ---- */

typedef struct jarena {
    struct jchunk *head;
    size_t used, limit; /* limit 0: none */
} jarena;

void *cpulm_jinja_alloc(jarena *a, size_t n); /* NULL: out of memory or over the limit */
void cpulm_jinja_arena_free(jarena *a);

/* ---- values ---- */

typedef enum jtype {
    JV_UNDEF = 0, /* Jinja's Undefined: prints "", iterates empty, errors on attribute access */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* also tuples (is_tuple) */
    JV_DICT, /* insertion-ordered; also namespace() objects and the loop variable */
    JV_FUNC,
} jtype;

typedef struct jstr {
    size_t len;
    char s[]; /* NUL-terminated UTF-8 */
} jstr;

typedef struct jv {
    jtype t;
    union {
        int64_t i; /* BOOL and INT */
        double f;
        const jstr *s;
        struct jlist *l;
        struct jdict *d;
        const struct jfunc *fn;
        const char *undef_name; /* UNDEF: the name, for error messages (may be NULL) */
    } u;
} jv;

typedef struct jlist {
    size_t n, cap;
    jv *v;
    int is_tuple;
} jlist;

enum { JD_DICT = 0, JD_NAMESPACE, JD_LOOP };

typedef struct jdict {
    size_t n, cap;
    jv *k, *v;
    int kind; /* JD_* */
} jdict;

typedef struct jnode jnode;

enum { JF_BUILTIN, JF_MACRO, JF_METHOD };

typedef struct jfunc {
    int kind;
    int id;            /* builtin or method id (jinja_lib.c) */
    const jnode *node; /* JF_MACRO: its definition */
    jv self;           /* JF_METHOD: the bound object */
} jfunc;

/* ---- AST ---- */

typedef enum jkind {
    /* expressions */
    N_LIT,
    N_NAME,
    N_ATTR,
    N_ITEM,
    N_SLICE,
    N_CALL,
    N_FILTER,
    N_TEST,
    N_NEG,
    N_POS,
    N_NOT,
    N_BIN,
    N_AND,
    N_OR,
    N_COMPARE,
    N_COND,
    N_LIST,
    N_TUPLE,
    N_DICT,
    /* statements */
    N_BODY,
    N_TEXT,
    N_OUT,
    N_IF,
    N_FOR,
    N_SET,
    N_SET_BLOCK,
    N_MACRO,
    N_BREAK,
    N_CONTINUE,
    N_FILTER_BLOCK,
} jkind;

struct jnode {
    jkind kind;
    int32_t line;
    int op;           /* N_BIN: operator char ('+', '-', '*', '/', 'f' for //, '%', 'p' for
                       **, '~'); N_TEST: 1 if negated; N_FOR: has tuple target */
    const char *name; /* names, attribute/filter/test names, N_TEXT bytes */
    size_t name_len;
    jv lit;               /* N_LIT */
    jnode *a, *b, *c, *d; /* children, by kind (see jinja_parse.c) */
    jnode **list;         /* positional args, items, conditions, statements */
    int32_t n;
    jnode **list2; /* keyword-argument values, dict values, if bodies */
    int32_t n2;
    const char **names; /* keyword names, loop/set targets, macro params, compare ops */
    int32_t n_names;
};

struct cpulm_jinja {
    jarena arena; /* tokens' text, nodes, literal values */
    jnode *root;  /* N_BODY */
};

/* ---- evaluation context (jinja.c), used by the library functions ---- */

typedef struct jinterp jinterp;

/* Records a runtime error (first one wins) and returns -1. */
int cpulm_jinja_fail(jinterp *in, int32_t line, cpulm_status code, const char *fmt, ...)
    CPULM_PRINTF(4, 5);
jarena *cpulm_jinja_arena(jinterp *in);
int cpulm_jinja_step(jinterp *in, int32_t line, int64_t n); /* counts work; -1 over the limit */
const cpulm_jinja_opts *cpulm_jinja_opts_of(jinterp *in);
/* Calls a callable value (macro, builtin, method) with evaluated arguments. */
int cpulm_jinja_call(jinterp *in, int32_t line, jv fn, const jv *args, int n_args,
                     const char *const *kw_names, const jv *kw_vals, int n_kw, jv *out);

/* value helpers (jinja.c) */
jv cpulm_jinja_str(jinterp *in, const char *s, size_t n); /* UNDEF with in's error on OOM */
int cpulm_jinja_ok(const jinterp *in);
int cpulm_jinja_truthy(jv v);
int cpulm_jinja_equal(jv a, jv b);
/* Python ordering: -1/0/1; 2 if the types cannot be ordered. */
int cpulm_jinja_compare(jv a, jv b);
/* str(v) appended to b (Python's str: None, True, 1.5, ['a', 1], {'k': 'v'}). */
void cpulm_jinja_to_buf(cpulm_buf *b, jv v);
/* str(v) as a value (strings returned as they are). */
jv cpulm_jinja_to_str(jinterp *in, jv v);
jlist *cpulm_jinja_list_new(jinterp *in, size_t cap);
int cpulm_jinja_list_push(jinterp *in, jlist *l, jv v);
jdict *cpulm_jinja_dict_new(jinterp *in, int kind);
int cpulm_jinja_dict_set(jinterp *in, jdict *d, jv k, jv v);
jv *cpulm_jinja_dict_get(const jdict *d, const char *key, size_t n);
jv *cpulm_jinja_dict_find(const jdict *d, jv key);
/* Iteration view: lists as they are, dict keys, string characters. -1 if not iterable. */
int cpulm_jinja_iter(jinterp *in, int32_t line, jv v, jlist **out);
/* JSON text as json.dumps(v, ensure_ascii=False, indent=indent, separators=seps) would
 * write it (indent < 0: None). */
int cpulm_jinja_tojson(jinterp *in, int32_t line, jv v, int indent, const char *item_sep,
                       const char *key_sep, cpulm_buf *b);
jv cpulm_jinja_from_json(jinterp *in, const cpulm_json *j);

/* ---- library (jinja_lib.c) ---- */

/* Global function by name (range, namespace, dict, raise_exception, strftime_now, ...). */
int cpulm_jinja_global(const char *name, size_t n, jv *out);
/* Attribute of a value that is a method (str.strip, dict.items, list.append, loop.cycle ...);
 * returns 0 and a bound method, or -1 if v has no such method. */
int cpulm_jinja_method(jinterp *in, jv v, const char *name, size_t n, jv *out);
int cpulm_jinja_call_builtin(jinterp *in, int32_t line, const jfunc *f, const jv *args, int n,
                             const char *const *kw_names, const jv *kw_vals, int n_kw, jv *out);
/* Applies filter `name` to v with args; -1 with an error for unknown filters. */
int cpulm_jinja_filter(jinterp *in, int32_t line, const char *name, jv v, const jv *args, int n,
                       const char *const *kw_names, const jv *kw_vals, int n_kw, jv *out);
/* Test `name` (defined, none, string, ...); *res = 0/1. */
int cpulm_jinja_test(jinterp *in, int32_t line, const char *name, jv v, const jv *args, int n,
                     int *res);

#endif

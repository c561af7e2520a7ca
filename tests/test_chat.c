/* test_chat.c: chat templates. The reference renders in testdata/chat (every case byte for
 * byte), the built-in templates against the same references, family detection and fallback,
 * the <think> filter, and the Jinja interpreter feature by feature (expectations are what
 * Jinja2 3.1 prints for each snippet), its errors and its limits. */
#include <string.h>

#include "base/json.h"
#include "chat/chat.h"
#include "chat/jinja.h"
#include "cpulm.h"
#include "test.h"

#define JULY_26_2024 1721952000 /* 2024-07-26 00:00:00 UTC, the date the references use */

/* ---- Jinja snippets ---- */

/* Renders src with vars (JSON object text or NULL); returns the status, output in *got. */
static cpulm_status render_opts(const char *src, const char *vars, const cpulm_jinja_syntax *syn,
                                const cpulm_jinja_opts *opts, cpulm_buf *got, cpulm_error *err) {
    cpulm_jinja *t = NULL;
    cpulm_json_doc *d = NULL;
    cpulm_buf_init(got, 0);
    cpulm_status st = cpulm_jinja_parse(src, strlen(src), syn, &t, err);
    if (!st && vars) st = cpulm_json_parse(vars, strlen(vars), NULL, &d, NULL, err);
    if (!st) st = cpulm_jinja_render(t, d ? cpulm_json_root(d) : NULL, opts, got, err);
    cpulm_jinja_free(t);
    cpulm_json_free(d);
    return st;
}

static void expect_syn(test_ctx *t, const char *src, const char *vars,
                       const cpulm_jinja_syntax *syn, const char *want) {
    cpulm_buf got;
    cpulm_error err = {0};
    cpulm_jinja_opts o = cpulm_jinja_default_opts();
    o.now = JULY_26_2024 + 3661;
    o.now_utc = 1;
    cpulm_status st = render_opts(src, vars, syn, &o, &got, &err);
    if (st != CPULM_OK || strcmp(got.data, want) != 0) {
        fprintf(stderr, "  template: %s\n  status %d %s\n  got:  [%s]\n  want: [%s]\n", src, st,
                st ? err.msg : "", got.data, want);
        t->n_fail++;
    }
    cpulm_buf_release(&got);
}

static void expect(test_ctx *t, const char *src, const char *want) {
    expect_syn(t, src, NULL, NULL, want);
}

static void expect_err(test_ctx *t, const char *src, cpulm_status want, const char *msg_part) {
    cpulm_buf got;
    cpulm_error err = {0};
    cpulm_jinja_opts o = cpulm_jinja_default_opts();
    o.max_output = 1 << 16;
    o.max_memory = 8 << 20;
    o.max_steps = 2000000;
    cpulm_status st = render_opts(src, NULL, NULL, &o, &got, &err);
    if (st != want || (msg_part && !strstr(err.msg, msg_part))) {
        fprintf(stderr, "  template: %.80s\n  status %d (want %d), msg '%s' (want '%s')\n", src, st,
                want, err.msg, msg_part ? msg_part : "");
        t->n_fail++;
    }
    cpulm_buf_release(&got);
}

TEST(chat_jinja_whitespace_control) {
    expect(t, "a  {%- if true -%}  b  {%- endif -%}  c", "abc");
    expect(t, "  {% if true %}\n  x\n  {% endif %}\ny", "  x\ny"); /* trim + lstrip */
    expect(t, "  {{ 'x' }}\n", "  x");                             /* lstrip: blocks only; one
                                                                       trailing newline dropped */
    expect(t, "  {%+ if true %}x{% endif %}", "  x");
    expect(t, "{% if true +%}\nx{% endif %}", "\nx");
    expect(t, "a{# note #}b\n{# c #}\nx", "ab\nx");
    expect(t, "a\r\nb\rc\n\n", "a\nb\nc\n"); /* newlines normalised, one trailing dropped */
    expect(t, "{{- '  a  ' -}}  \n  {{- 'b' }}", "  a  b");
    expect(t, "x  {#- c -#}  y", "xy");
    cpulm_jinja_syntax raw = {0, 0, 1};
    expect_syn(t, "  {% if true %}\n  x\n  {% endif %}\ny\n", NULL, &raw, "  \n  x\n  \ny\n");
}

TEST(chat_jinja_loops) {
    expect(t,
           "{% for x in ['a','b','c'] %}{{ loop.index }}{{ x }}{% if not loop.last %},{% endif "
           "%}{% endfor %}",
           "1a,2b,3c");
    expect(t,
           "{% for x in 'ab' %}{{ loop.index0 }}{{ loop.first }}{{ loop.length }}{{ loop.revindex "
           "}}{% endfor %}",
           "0True221False21");
    expect(t, "{% for x in [] %}x{% else %}empty{% endfor %}", "empty");
    expect(t, "{% for x in range(10) if x is even %}{{ x }}{{ ',' if not loop.last }}{% endfor %}",
           "0,2,4,6,8");
    expect(t,
           "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% "
           "break %}{% endif %}{{ x }}{% endfor %}",
           "0134");
    expect(t, "{% for k, v in {'a': 1, 'b': 2} | items %}{{ k }}={{ v }};{% endfor %}", "a=1;b=2;");
    expect(t, "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}", "a1b2");
    expect(t, "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}", "xy");
    expect(t, "{% for i in range(3) %}{{ loop.cycle('a', 'b') }}{{ loop.previtem }}{% endfor %}",
           "ab0a1");
    expect(t,
           "{% for i in range(2, 8, 3) %}{{ i }}{% endfor %}|{% for i in range(3, 0, -1) %}{{ i "
           "}}{% endfor %}",
           "25|321");
    expect(t, "{% for a in [1, 2] %}{% for b in [3, 4] %}{{ a * b }} {% endfor %}{% endfor %}",
           "3 4 6 8 ");
}

TEST(chat_jinja_scoping_and_set) {
    expect(t, "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}", "21");
    expect(t, "{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", "2");
    expect(t,
           "{% set ns = namespace(n=0) %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% endfor "
           "%}{{ ns.n }}",
           "6");
    expect(t,
           "{% set ns = namespace(found=false) %}{% for m in ['a', 'b'] %}{% if m == 'b' %}{% set "
           "ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
           "True");
    expect(t, "{% set x %}a{{ 1 + 1 }}b{% endset %}[{{ x }}]", "[a2b]");
    expect(t, "{% set a, b = [1, 2] %}{{ b }}{{ a }}", "21");
    expect(t, "{% set t = 1, 2 %}{{ t }}", "(1, 2)");
    expect(t, "{% filter upper %}abc{{ 'd' }}{% endfilter %}", "ABCD");
    expect(t,
           "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ "
           "greet('Bob') }} {{ greet('Al', punct='?') }}",
           "Hi Bob! Hi Al?");
    expect(t,
           "{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(3) }}",
           "321");
    expect(t, "{% generation %}kept{% endgeneration %}", "kept");
}

TEST(chat_jinja_operators) {
    expect(t,
           "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 "
           "* 3 }} {{ (1 + 2) * 3 }}",
           "3 -4 1 2 3.5 1024 7 9");
    expect(t,
           "{{ 'a' ~ 1 ~ none }} {{ 'ab' * 3 }} {{ [1] + [2] }} {{ 1.5 + 1 }} {{ 2 ** -1 }} {{ "
           "-7.5 // 2 }}",
           "a1None ababab [1, 2] 2.5 0.5 -4.0");
    expect(t,
           "{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 'b' in 'abc' }} {{ 3 not in [1,2] }} {{ 'k' in "
           "{'k': 1} }} {{ 1 == 1.0 }} {{ 'a' < 'b' }}",
           "True False True True True True True");
    expect(t, "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ none or [] }} {{ not 0 }} {{ not none is none }}",
           "x y [] True False");
    expect(t, "{{ 'yes' if 1 > 2 else 'no' }}|{{ 'x' if false }}|", "no||");
    expect(t, "{{ -(3) }} {{ +2 }} {{ - 2 | abs }}", "-3 2 2");
    expect(t,
           "{{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ none == none }} {{ 'a' != 'a' }}",
           "True True True False");
}

TEST(chat_jinja_access_and_slices) {
    expect(t,
           "{{ [1,2,3,4][1:] }} {{ 'hello'[::-1] }} {{ [1,2,3,4][::2] }} {{ [1,2,3][-2:] }} {{ "
           "[1,2,3][:-1] }} {{ [1,2,3][5:] }}",
           "[2, 3, 4] olleh [1, 3] [2, 3] [1, 2] []");
    expect(t, "{{ 'h\xc3\xa9llo'[1:3] }}{{ 'h\xc3\xa9llo'[1] }}{{ 'h\xc3\xa9llo' | length }}",
           "\xc3\xa9l\xc3\xa9"
           "5");
    expect(t,
           "{{ [1,2,3][-1] }} {{ [1,2,3][7] }}|{{ {'a': {'b': 1}}['a']['b'] }} {{ {'a': {'b': "
           "1}}.a.b }}",
           "3 |1 1");
    expect_syn(t,
               "{{ messages[0].role }} {{ messages[1]['content'] }} {{ messages[0].missing }}|{{ "
               "messages | length }}",
               "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": "
               "\"assistant\", \"content\": \"yo\"}]}",
               NULL, "user yo |2");
    expect(t, "{{ none.x }}|{{ {}.x }}|{{ x }}|{{ x | length }}", "|||0");
    expect(t, "{{ (1, 2)[0] }} {{ ('a',) }} {{ () }}", "1 ('a',) ()");
}

TEST(chat_jinja_value_printing) {
    expect(t,
           "{{ none }}|{{ true }}|{{ 1.0 }}|{{ 1e20 }}|{{ 0.1 + 0.2 }}|{{ [1, 'a', none, 2.5] "
           "}}|{{ {'k': 'v'} }}|{{ undefined_var }}|",
           "None|True|1.0|1e+20|0.30000000000000004|[1, 'a', None, 2.5]|{'k': 'v'}||");
    expect(t, "{{ [\"it's\", 'say \"x\"', 'a\\nb'] }}", "[\"it's\", 'say \"x\"', 'a\\nb']");
    expect(t, "{{ 'a\\tb\\u00e9\\x41\\'' }}",
           "a\tb\xc3\xa9"
           "A'");
    expect(t, "{{ 'con' 'cat' }} {{ 1_000 }}", "concat 1000");
}

TEST(chat_jinja_tests) {
    expect(t,
           "{{ x is defined }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }} {{ [1] is "
           "iterable }} {{ {} is mapping }} {{ 3 is odd }} {{ 4 is divisibleby 2 }} {{ 'x' is not "
           "none }}",
           "False True True True True True True True True");
    expect(t,
           "{{ 1 is integer }} {{ 1.0 is float }} {{ true is boolean }} {{ x is undefined }} {{ 2 "
           "is even }} {{ 'ab' is lower }} {{ 'A' is upper }}",
           "True True True True True True True");
    expect(t,
           "{{ 1 is equalto 1 }} {{ 2 is gt(1) }} {{ 'a' is in ['a'] }} {{ none is sameas none }} "
           "{{ range is callable }}",
           "True True True True True");
}

TEST(chat_jinja_filters) {
    expect(t,
           "[{{ '  x y \\n' | trim }}] {{ 'Ab' | upper }}{{ 'Ab' | lower }} {{ 'hello world' | "
           "title }} {{ 'hELLO' | capitalize }}",
           "[x y] ABab Hello World Hello");
    expect(t,
           "{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}{{ 'xyz' | first }} {{ [1, 2, 3] | "
           "join('-') }} {{ ['a', 'b'] | join }}",
           "32x 1-2-3 ab");
    expect(t,
           "{{ 'aXbX' | replace('X', '-') }} {{ x | default('dflt') }} {{ '' | default('e', true) "
           "}} {{ 0 | d('z') }}",
           "a-b- dflt e 0");
    expect(t,
           "{{ [3, 1, 2] | sort }} {{ [3, 1, 2] | sort(reverse=true) }} {{ [1, 2, 1, 3] | unique | "
           "list }} {{ [1, 2] | reverse | list }} {{ 'abc' | reverse }}",
           "[1, 2, 3] [3, 2, 1] [1, 2, 3] [2, 1] cba");
    expect(t,
           "{{ [1, 2, 3] | sum }} {{ [4, 2, 8] | min }} {{ [4, 2, 8] | max }} {{ '42' | int + 1 }} "
           "{{ '2.5' | float }} {{ 'x' | int }} {{ 2.567 | round(2) }} {{ 3.7 | int }}",
           "6 2 8 43 2.5 0 2.57 3");
    expect(t, "{{ 'a\\nb\\n\\nc' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}",
           "a\n  b\n\n  c|  a\n  b");
    expect(t,
           "{{ '<a href=\"x\">&' | e }} {{ 42 | string | length }} {{ 'one two  three' | wordcount "
           "}} {{ '%s-%d' | format('a', 3) }}",
           "&lt;a href=&#34;x&#34;&gt;&amp; 2 3 a-3");
    expect(t,
           "{{ {'b': 1, 'a': 2} | dictsort }} {{ ['a', 'b'] | map('upper') | join }} {{ [1, 0, 2] "
           "| select | list }} {{ [1, 0, 2] | reject('odd') | list }}",
           "[('a', 2), ('b', 1)] AB [1, 2] [0, 2]");
    expect_syn(t,
               "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages "
               "| map(attribute='role') | join(',') }} {{ messages | rejectattr('role', 'in', "
               "['user']) | map(attribute='content') | first }}",
               "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": "
               "\"assistant\", \"content\": \"b\"}, {\"role\": \"user\", \"content\": \"c\"}]}",
               NULL, "2 user,assistant,user b");
}

TEST(chat_jinja_tojson_matches_python) {
    /* Python: json.dumps(x, ensure_ascii=False[, indent=2]) */
    expect(t, "{{ {'a': [1, 2.5, '\xc3\xa9\"\\n'], 'b': none, 'c': true, 'd': {}} | tojson }}",
           "{\"a\": [1, 2.5, \"\xc3\xa9\\\"\\n\"], \"b\": null, \"c\": true, \"d\": {}}");
    expect(t, "{{ {'a': [1], 'b': []} | tojson(indent=2) }}",
           "{\n  \"a\": [\n    1\n  ],\n  \"b\": []\n}");
    expect(t,
           "{{ 'x' | tojson }} {{ 1.0 | tojson }} {{ {1: 2} | tojson }} {{ (1, 2) | "
           "tojson(separators=(',', ':')) }}",
           "\"x\" 1.0 {\"1\": 2} [1,2]");
    expect_syn(t, "{{ tools | tojson }}",
               "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
               "\"parameters\": {\"n\": 12345678901234}}}]}",
               NULL,
               "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"n\": "
               "12345678901234}}}]");
}

TEST(chat_jinja_string_methods) {
    expect(t,
           "{{ '  x  '.strip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ "
           "'abc'.startswith('ab') }}|{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXbX'.replace('X', '-', "
           "1) }}",
           "x|['a', 'b', '', 'c']|['a', 'b']|True|True|a-bX");
    expect(t,
           "{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}|{{ 'xxhixx'.lstrip('x') }}{{ 'xxhixx'.rstrip('x') "
           "}}|{{ 'a b'.title() }}|{{ 'x</think>y'.split('</think>')[-1] }}",
           "HIhi|hixxxxhi|A B|y");
    expect(t,
           "{{ 'abcb'.find('b') }}{{ 'abcb'.count('b') }}{{ ', '.join(['a', 'b']) }}{{ "
           "'a\\nb'.splitlines() }}",
           "12a, b['a', 'b']");
    expect(t,
           "{{ '\xc2\xa0 x \xe2\x80\x83'.strip() }}|{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b', 0) "
           "}}{{ {'a': 1}.keys() | list }}",
           "x|10['a']");
    expect(t, "{% set l = [1] %}{% set _ = l.append(2) %}{{ l }}{{ l.pop() }}{{ l }}",
           "[1, 2]2[1]");
}

TEST(chat_jinja_strftime_and_raise) {
    expect(t,
           "{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %-d %j %p %a "
           "%y %%') }}",
           "26 Jul 2024|2024-07-26 01:01:01 Friday July 26 208 AM Fri 24 %");
    expect_err(t, "{% if true %}{{ raise_exception('roles must alternate') }}{% endif %}",
               CPULM_ERR_INVALID_ARG, "line 1: template raised an exception: roles must alternate");
}

TEST(chat_jinja_runtime_errors) {
    expect_err(t, "{{ foo.bar }}", CPULM_ERR_INVALID_ARG, "'foo' is undefined");
    expect_err(t, "\n\n{{ foo['x'] }}", CPULM_ERR_INVALID_ARG, "line 3: 'foo' is undefined");
    expect_err(t, "{{ 'a' + 1 }}", CPULM_ERR_INVALID_ARG,
               "unsupported operand type(s) for +: 'str' and 'int'");
    expect_err(t, "{{ 1 // 0 }}", CPULM_ERR_INVALID_ARG, "by zero");
    expect_err(t, "{{ 1 < 'a' }}", CPULM_ERR_INVALID_ARG, "not supported");
    expect_err(t, "{% for x in 1 %}{% endfor %}", CPULM_ERR_INVALID_ARG, "not iterable");
    expect_err(t, "{{ x | nosuchfilter }}", CPULM_ERR_UNSUPPORTED, "unknown filter 'nosuchfilter'");
    expect_err(t, "{{ x is nosuchtest }}", CPULM_ERR_UNSUPPORTED, "unknown test");
    expect_err(t, "{% set x = 1 %}{% set x.a = 2 %}", CPULM_ERR_INVALID_ARG, "non-namespace");
    expect_err(t, "{{ 9223372036854775807 + 1 }}", CPULM_ERR_INVALID_ARG, "overflow");
    expect_err(t, "{{ undefined_fn() }}", CPULM_ERR_INVALID_ARG, "'undefined_fn' is undefined");
}

TEST(chat_jinja_syntax_errors) {
    expect_err(t, "{% if x %}", CPULM_ERR_FORMAT, "missing 'endif'");
    expect_err(t, "{{ 1 + }}", CPULM_ERR_FORMAT, "line 1");
    expect_err(t, "{% for %}{% endfor %}", CPULM_ERR_FORMAT, NULL);
    expect_err(t, "a\n{{ 'abc }}", CPULM_ERR_FORMAT, "line 2: unterminated string");
    expect_err(t, "{% endfor %}", CPULM_ERR_FORMAT, "unsupported statement 'endfor'");
    expect_err(t, "{{ x", CPULM_ERR_FORMAT, "unclosed tag");
    expect_err(t, "{# x", CPULM_ERR_FORMAT, "unclosed comment");
    expect_err(t, "{% include 'x' %}", CPULM_ERR_FORMAT, "unsupported");
    expect_err(t, "{{ f(a=1, 2) }}", CPULM_ERR_FORMAT, "positional argument after keyword");
    expect_err(t, "{{ $ }}", CPULM_ERR_FORMAT, "unexpected character");
    char *src = malloc(20010); /* {{ ((((...1...)))) }} */
    REQUIRE(t, src);
    memcpy(src, "{{ ", 3);
    memset(src + 3, '(', 10000);
    src[10003] = '1';
    memset(src + 10004, ')', 10000);
    memcpy(src + 20004, " }}", 4);
    expect_err(t, src, CPULM_ERR_FORMAT, "nesting too deep");
    free(src);
}

TEST(chat_jinja_limits) {
    expect_err(t,
               "{% set l = range(2000) %}{% for i in l %}{% for j in l %}{% endfor %}{% endfor %}",
               CPULM_ERR_TOO_SMALL, "step limit");
    expect_err(t,
               "{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = ns.l + "
               "range(1000) %}{% endfor %}",
               CPULM_ERR_TOO_SMALL, "line 1: memory limit");
    expect_err(t, "{% for i in range(100000) %}xxxxxxxxxx{% endfor %}", CPULM_ERR_TOO_SMALL,
               "output limit");
    expect_err(t,
               "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s "
               "%}{% endfor %}",
               CPULM_ERR_TOO_SMALL, NULL);
    expect_err(t, "{{ 'x' * 100000000000 }}", CPULM_ERR_TOO_SMALL, NULL);
    expect_err(t, "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", CPULM_ERR_TOO_SMALL,
               "recursion");
    expect_err(t, "{{ range(100000000) | length }}", CPULM_ERR_TOO_SMALL, NULL);
    /* a caller's own buffer limit is reported too, and the buffer is left consistent */
    cpulm_jinja *tp = NULL;
    REQUIRE(t, cpulm_jinja_parse("0123456789", 10, NULL, &tp, NULL) == CPULM_OK);
    cpulm_buf b;
    cpulm_buf_init(&b, 4);
    CHECK_EQ_INT(t, cpulm_jinja_render(tp, NULL, NULL, &b, NULL), CPULM_ERR_TOO_SMALL);
    CHECK(t, b.len <= 4 && b.data[b.len] == '\0');
    cpulm_buf_release(&b);
    cpulm_buf_init(&b, 0);
    CHECK_EQ_INT(t, cpulm_jinja_render(tp, NULL, NULL, &b, NULL), CPULM_OK);
    CHECK(t, strcmp(b.data, "0123456789") == 0);
    cpulm_buf_release(&b);
    cpulm_jinja_free(tp);
}

/* Mutated reference templates (byte flips, truncations): any status, never a crash
 * (the ASan build is the real check). */
TEST(chat_jinja_survives_mutations) {
    const char *path = test_shared_path("testdata/chat/templates/llama3.1.jinja");
    if (!path) SKIP(t, "CPULM_SHARED test data not found");
    size_t n;
    char *src = test_read_file(path, &n);
    REQUIRE(t, src);
    static const char alphabet[] = "{}%#-+()[]'\"|.,:=~ \nabx0";
    uint64_t x = 0x9E3779B97F4A7C15ull;
    char *m = malloc(n + 1);
    int n_ok = 0;
    for (int it = 0; it < 300; it++) {
        memcpy(m, src, n + 1);
        size_t len = n;
        for (int k = 0; k < 3; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            m[x % len] = alphabet[(x >> 32) % (sizeof alphabet - 1)];
        }
        if (it % 10 == 0) len = (size_t)(x >> 40) % len;
        m[len] = 0;
        cpulm_buf got;
        cpulm_jinja_opts o = cpulm_jinja_default_opts();
        o.max_steps = 200000;
        cpulm_status st = render_opts(m,
                                      "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, "
                                      "{\"role\": \"user\", \"content\": \"u\"}]}",
                                      NULL, &o, &got, NULL);
        n_ok += st == CPULM_OK;
        CHECK(t, st <= 0 && got.data[got.len] == '\0');
        cpulm_buf_release(&got);
    }
    CHECK(t, n_ok > 0); /* some mutations stay valid templates */
    free(m);
    free(src);
}

/* ---- the reference cases ---- */

typedef struct ref_cases {
    char *text;
    cpulm_json_doc *doc;
    const cpulm_json *cases, *convs;
} ref_cases;

static int load_cases(test_ctx *t, ref_cases *c) {
    const char *path = test_shared_path("testdata/chat/cases.json");
    memset(c, 0, sizeof *c);
    if (!path) return 0;
    size_t n;
    c->text = test_read_file(path, &n);
    if (!c->text || cpulm_json_parse(c->text, n, NULL, &c->doc, NULL, NULL) != CPULM_OK) {
        t->n_fail++;
        return 0;
    }
    c->cases = cpulm_json_get(cpulm_json_root(c->doc), "cases");
    c->convs = cpulm_json_get(cpulm_json_root(c->doc), "conversations");
    return c->cases && c->convs;
}

static void free_cases(ref_cases *c) {
    cpulm_json_free(c->doc);
    free(c->text);
}

static char *to_json(const cpulm_json *v) {
    cpulm_buf b;
    cpulm_json_writer w;
    cpulm_buf_init(&b, 0);
    cpulm_json_writer_init(&w, &b, 0, 0);
    cpulm_json_write_value(&w, v);
    return cpulm_buf_detach(&b, NULL);
}

/* Renders case c with template source tmpl through the public API. */
static cpulm_status render_case(const ref_cases *cs, const cpulm_json *c, const char *tmpl,
                                char **out, cpulm_error *err) {
    const cpulm_json *conv =
        cpulm_json_at(cs->convs, (size_t)cpulm_json_num(cpulm_json_get(c, "conversation"), 0));
    char *msgs = to_json(conv);
    cpulm_chat_params p = cpulm_chat_default_params();
    p.add_generation_prompt = cpulm_json_bool(cpulm_json_get(c, "add_generation_prompt"), 0);
    p.bos_token = cpulm_json_str(cpulm_json_get(c, "bos_token"));
    p.eos_token = cpulm_json_str(cpulm_json_get(c, "eos_token"));
    p.now = JULY_26_2024;
    p.now_utc = 1;
    cpulm_status st = cpulm_chat_render_json(tmpl, msgs, &p, out, err);
    free(msgs);
    return st;
}

static char *case_template(const cpulm_json *c) {
    char rel[256];
    snprintf(rel, sizeof rel, "testdata/chat/%s",
             cpulm_json_str(cpulm_json_get(c, "template_file")));
    const char *path = test_shared_path(rel);
    return path ? test_read_file(path, NULL) : NULL;
}

static int check_case(test_ctx *t, const ref_cases *cs, const cpulm_json *c, const char *tmpl,
                      const char *label) {
    char *got = NULL;
    cpulm_error err = {0};
    cpulm_status st = render_case(cs, c, tmpl, &got, &err);
    const char *want = cpulm_json_str(cpulm_json_get(c, "expected"));
    int ok = st == CPULM_OK && got && want && strcmp(got, want) == 0;
    if (!ok) {
        fprintf(stderr,
                "  %s: template %s, conversation %g, generation prompt %d: %s\n  got:  [%s]\n  "
                "want: [%s]\n",
                label, cpulm_json_str(cpulm_json_get(c, "template")),
                cpulm_json_num(cpulm_json_get(c, "conversation"), -1),
                cpulm_json_bool(cpulm_json_get(c, "add_generation_prompt"), 0),
                st ? err.msg : "mismatch", got ? got : "", want ? want : "");
        t->n_fail++;
    }
    free(got);
    return ok;
}

TEST(chat_reference_cases_byte_for_byte) {
    ref_cases cs;
    if (!load_cases(t, &cs)) SKIP(t, "CPULM_SHARED test data not found");
    size_t n = cpulm_json_len(cs.cases), n_ok = 0;
    CHECK(t, n >= 40);
    for (size_t i = 0; i < n; i++) {
        const cpulm_json *c = cpulm_json_at(cs.cases, i);
        char *tmpl = case_template(c);
        CHECK(t, tmpl != NULL);
        /* the detected family must not matter: the real template is interpreted */
        n_ok += tmpl && check_case(t, &cs, c, tmpl, "interpreted");
        free(tmpl);
    }
    CHECK_EQ_INT(t, n_ok, n);
    free_cases(&cs);
}

TEST(chat_builtins_match_reference_formats) {
    ref_cases cs;
    if (!load_cases(t, &cs)) SKIP(t, "CPULM_SHARED test data not found");
    int checked = 0;
    for (size_t i = 0; i < cpulm_json_len(cs.cases); i++) {
        const cpulm_json *c = cpulm_json_at(cs.cases, i);
        const char *name = cpulm_json_str(cpulm_json_get(c, "template"));
        double conv = cpulm_json_num(cpulm_json_get(c, "conversation"), -1);
        const char *builtin = NULL;
        if (!strcmp(name, "llama3")) builtin = "llama3";
        if (!strncmp(name, "deepseek-r1", 11)) builtin = "deepseek-r1";
        if (!strcmp(name, "qwen2.5") && (conv == 1 || conv == 2))
            builtin = "chatml"; /* with a system turn */
        if (!builtin) continue;
        checked++;
        check_case(t, &cs, c, cpulm_chat_builtin(builtin), builtin);
    }
    CHECK_EQ_INT(t, checked, 8 + 16 + 4);
    free_cases(&cs);
}

TEST(chat_detect_and_builtin_names) {
    static const struct {
        const char *file, *family;
    } files[] = {{"llama3.jinja", "llama3"},
                 {"llama3.1.jinja", "llama3"},
                 {"qwen2.5.jinja", "chatml"},
                 {"deepseek-r1-distill-llama.jinja", "deepseek-r1"},
                 {"deepseek-r1-distill-qwen.jinja", "deepseek-r1"}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "testdata/chat/templates/%s", files[i].file);
        const char *path = test_shared_path(rel);
        if (!path) SKIP(t, "CPULM_SHARED test data not found");
        char *src = test_read_file(path, NULL);
        REQUIRE(t, src);
        const char *fam = cpulm_chat_detect(src);
        CHECK(t, fam && !strcmp(fam, files[i].family));
        free(src);
    }
    CHECK(t, cpulm_chat_detect("{{ messages }}") == NULL);
    CHECK(t, cpulm_chat_detect(NULL) == NULL);
    static const char *const names[] = {"llama3", "llama2",      "mistral",
                                        "chatml", "deepseek-r1", "plain"};
    for (size_t i = 0; i < 6; i++) {
        const char *src = cpulm_chat_builtin(names[i]);
        REQUIRE(t, src != NULL);
        const char *fam = cpulm_chat_detect(src);
        CHECK(t, i == 5 ? fam == NULL : (fam && !strcmp(fam, names[i])));
    }
    CHECK(t, cpulm_chat_builtin("nope") == NULL);
    CHECK(t, cpulm_chat_builtin(NULL) == NULL);
}

static void expect_chat(test_ctx *t, const char *tmpl, const cpulm_chat_msg *m, int n, int agp,
                        const char *want) {
    char *got = NULL;
    cpulm_error err = {0};
    cpulm_status st = cpulm_chat_render(tmpl, m, n, agp, "<s>", "</s>", &got, &err);
    if (st != CPULM_OK || !got || strcmp(got, want)) {
        fprintf(stderr, "  status %d %s\n  got:  [%s]\n  want: [%s]\n", st, st ? err.msg : "",
                got ? got : "", want);
        t->n_fail++;
    }
    free(got);
}

TEST(chat_builtin_llama2_mistral_plain) {
    const cpulm_chat_msg conv[] = {
        {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}, {"user", "Bye"}};
    expect_chat(
        t, cpulm_chat_builtin("llama2"), conv, 4, 1,
        "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello </s><s>[INST] Bye [/INST]");
    expect_chat(t, cpulm_chat_builtin("mistral"), conv, 4, 1,
                "<s>[INST] Be brief.\n\nHi [/INST]Hello</s>[INST] Bye [/INST]");
    expect_chat(t, NULL, conv, 4, 1,
                "System: Be brief.\nUser: Hi\nAssistant: Hello\nUser: Bye\nAssistant:");
    expect_chat(t, "", conv + 1, 1, 0, "User: Hi\n");
    const cpulm_chat_msg tool_only[] = {{"user", "x"}, {"assistant", NULL}};
    expect_chat(t, cpulm_chat_builtin("chatml"), tool_only, 2, 0,
                "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n");
}

TEST(chat_fallback_to_detected_family) {
    /* llama3 markers, but a statement we do not implement: the llama3 built-in renders it */
    const char *tmpl = "{% include 'header.jinja' %}<|start_header_id|>";
    const cpulm_chat_msg m[] = {{"user", " Hello "}};
    expect_chat(t, tmpl, m, 1, 1,
                "<s><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>"
                "assistant<|end_header_id|>\n\n");
    /* no recognisable family: the parse error is returned */
    char *out = (char *)1;
    cpulm_error err = {0};
    CHECK_EQ_INT(t, cpulm_chat_render("{% include 'x' %}", m, 1, 0, NULL, NULL, &out, &err),
                 CPULM_ERR_FORMAT);
    CHECK(t, out == NULL && strstr(err.msg, "include"));
    /* a deliberate raise_exception is not papered over by the fallback */
    CHECK_EQ_INT(t,
                 cpulm_chat_render("<|im_start|>{{ raise_exception('no system role') }}", m, 1, 0,
                                   NULL, NULL, &out, &err),
                 CPULM_ERR_INVALID_ARG);
    CHECK(t, strstr(err.msg, "no system role") != NULL);
}

TEST(chat_render_json_params) {
    char *out = NULL;
    cpulm_error err = {0};
    cpulm_chat_params p = cpulm_chat_default_params();
    CHECK_EQ_INT(t, p.enable_thinking, 1);
    CHECK_EQ_INT(t, p.now, -1);
    p.extra_json = "{\"tools\": [{\"name\": \"f\"}], \"enable_thinking\": false}";
    const char *tmpl = "{{ tools | tojson }}|{{ enable_thinking }}|{{ "
                       "messages[0].tool_calls[0].function.name }}|{{ bos_token }}";
    CHECK_EQ_INT(t,
                 cpulm_chat_render_json(tmpl,
                                        "[{\"role\": \"assistant\", \"content\": null, "
                                        "\"tool_calls\": [{\"function\": {\"name\": \"g\"}}]}]",
                                        &p, &out, &err),
                 CPULM_OK);
    CHECK(t, out && !strcmp(out, "[{\"name\": \"f\"}]|False|g|"));
    free(out);
    CHECK_EQ_INT(t, cpulm_chat_render_json(tmpl, "{\"role\": 1}", &p, &out, &err),
                 CPULM_ERR_FORMAT);
    CHECK(t, out == NULL && strstr(err.msg, "messages must be a JSON array"));
    CHECK_EQ_INT(t, cpulm_chat_render_json(tmpl, "[", &p, &out, &err), CPULM_ERR_FORMAT);
    p.extra_json = "[]";
    CHECK_EQ_INT(t, cpulm_chat_render_json(tmpl, "[]", &p, &out, &err), CPULM_ERR_FORMAT);
    CHECK_EQ_INT(t, cpulm_chat_render(tmpl, NULL, -1, 0, NULL, NULL, &out, &err),
                 CPULM_ERR_INVALID_ARG);
}

/* ---- <think> filter ---- */

static void think_run(cpulm_chat_think *f, const char *s, size_t split, char *got) {
    char out[256];
    int32_t k = 0, n = (int32_t)strlen(s);
    int32_t a = (int32_t)split < n ? (int32_t)split : n;
    got[0] = 0;
    k = cpulm_chat_think_push(f, s, a, out, sizeof out);
    strncat(got, out, (size_t)k);
    k = cpulm_chat_think_push(f, s + a, n - a, out, sizeof out);
    strncat(got, out, (size_t)k);
    k = cpulm_chat_think_flush(f, out, sizeof out);
    strncat(got, out, (size_t)k);
}

TEST(chat_think_filter_streaming) {
    static const struct {
        int inside;
        const char *in, *want;
    } cases[] = {
        {0, "<think>plan it</think>\n\nHello <b>!", "Hello <b>!"},
        {1, "17 has no divisors.\n</think>\n\nYes, prime.", "Yes, prime."},
        {0, "a < b <thin", "a < b <thin"},
        {0, "x<<think>y</think>z</think>", "x<z</think>"},
        {0, "no tags at all", "no tags at all"},
        {1, "never closed", ""},
        {0, "<think></think>  <think>a</think> b", "b"},
    };
    char got[512];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].in);
        for (size_t split = 0; split <= n; split++) { /* every two-chunk split */
            cpulm_chat_think f;
            cpulm_chat_think_init(&f, cases[i].inside);
            think_run(&f, cases[i].in, split, got);
            if (strcmp(got, cases[i].want)) {
                fprintf(stderr, "  case %zu split %zu: got [%s] want [%s]\n", i, split, got,
                        cases[i].want);
                t->n_fail++;
                break;
            }
        }
        cpulm_chat_think f; /* byte by byte */
        cpulm_chat_think_init(&f, cases[i].inside);
        char out[64];
        got[0] = 0;
        for (size_t j = 0; j < n; j++) {
            int32_t k = cpulm_chat_think_push(&f, cases[i].in + j, 1, out, sizeof out);
            strncat(got, out, (size_t)k);
        }
        strncat(got, out, (size_t)cpulm_chat_think_flush(&f, out, sizeof out));
        CHECK(t, strcmp(got, cases[i].want) == 0);
    }
    cpulm_chat_think f;
    char small[8];
    cpulm_chat_think_init(&f, 0);
    CHECK_EQ_INT(t, cpulm_chat_think_push(&f, "abc", 3, small, sizeof small), CPULM_ERR_TOO_SMALL);
}

/* Reasoning kept instead of dropped (the server's reasoning_content): every two-chunk split
 * gives the same content and reasoning; the prompt-opened form; the end-of-choice flush. */
TEST(chat_think_split_keeps_reasoning) {
    static const struct {
        int inside;
        const char *in, *content, *reasoning;
    } cases[] = {
        {0, "<think>\nplan it\n</think>\n\nHello <b>!", "Hello <b>!", "plan it\n"},
        {1, "\n17 is prime.\n</think>\n\nYes.", "Yes.", "17 is prime.\n"},
        {0, "no tags </thin", "no tags </thin", ""},
        {0, "<think>a</think>b<think> c</think> d", "bd", "ac"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n = strlen(cases[i].in);
        for (size_t split = 0; split <= n; split++) {
            cpulm_chat_think f;
            cpulm_chat_think_init(&f, cases[i].inside);
            char c[256] = "", r[256] = "", out[128], rout[128];
            int32_t nr = 0, k;
            k = cpulm_chat_think_split(&f, cases[i].in, (int32_t)split, out, rout, 100, &nr);
            strncat(c, out, (size_t)k), strncat(r, rout, (size_t)nr);
            k = cpulm_chat_think_split(&f, cases[i].in + split, (int32_t)(n - split), out, rout,
                                       100, &nr);
            strncat(c, out, (size_t)k), strncat(r, rout, (size_t)nr);
            k = cpulm_chat_think_split(&f, NULL, 0, out, rout, 100, &nr);
            strncat(c, out, (size_t)k), strncat(r, rout, (size_t)nr);
            if (strcmp(c, cases[i].content) || strcmp(r, cases[i].reasoning)) {
                fprintf(stderr, "  case %zu split %zu: [%s] [%s]\n", i, split, c, r);
                t->n_fail++;
                break;
            }
        }
    }
    CHECK(t, cpulm_chat_opens_think("x<think>\n", 9) && !cpulm_chat_opens_think("x</think>\n", 10));
    CHECK(t, !cpulm_chat_opens_think("<|im_start|>assistant\n", 22));
}

/* Qwen3's own template (as its GGUF files carry it): earlier turns' reasoning dropped, the
 * current turn's kept, enable_thinking=false opens and closes an empty think block. */
static const char qwen3_template[] =
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- messages[0].content + '\\n\\n' }}\n"
    "    {%- endif %}\n"
    "    {{- \"# Tools\\n\\nYou may call one or more functions to assist with the user "
    "query.\\n\\nYou are provided with function signatures within <tools></tools> XML "
    "tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n"
    "        {{- \"\\n\" }}\n"
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name "
    "and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": "
    "<function-name>, \\\"arguments\\\": <args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n"
    "{%- else %}\n"
    "    {%- if messages[0].role == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n"
    "{%- for message in messages[::-1] %}\n"
    "    {%- set index = (messages|length - 1) - loop.index0 %}\n"
    "    {%- if ns.multi_step_tool and message.role == \"user\" and message.content is string and "
    "not(message.content.startswith('<tool_response>') and "
    "message.content.endswith('</tool_response>')) %}\n"
    "        {%- set ns.multi_step_tool = false %}\n"
    "        {%- set ns.last_query_index = index %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message.content is string %}\n"
    "        {%- set content = message.content %}\n"
    "    {%- else %}\n"
    "        {%- set content = '' %}\n"
    "    {%- endif %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n"
    "        {%- set reasoning_content = '' %}\n"
    "        {%- if message.reasoning_content is string %}\n"
    "            {%- set reasoning_content = message.reasoning_content %}\n"
    "        {%- else %}\n"
    "            {%- if '</think>' in content %}\n"
    "                {%- set reasoning_content = "
    "content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n"
    "                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n"
    "            {%- endif %}\n"
    "        {%- endif %}\n"
    "        {%- if loop.index0 > ns.last_query_index %}\n"
    "            {%- if loop.last or (not loop.last and reasoning_content) %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + "
    "reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n"
    "            {%- else %}\n"
    "                {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "            {%- endif %}\n"
    "        {%- else %}\n"
    "            {{- '<|im_start|>' + message.role + '\\n' + content }}\n"
    "        {%- endif %}\n"
    "        {%- if message.tool_calls %}\n"
    "            {%- for tool_call in message.tool_calls %}\n"
    "                {%- if (loop.first and content) or (not loop.first) %}\n"
    "                    {{- '\\n' }}\n"
    "                {%- endif %}\n"
    "                {%- if tool_call.function %}\n"
    "                    {%- set tool_call = tool_call.function %}\n"
    "                {%- endif %}\n"
    "                {{- '<tool_call>\\n{\"name\": \"' }}\n"
    "                {{- tool_call.name }}\n"
    "                {{- '\", \"arguments\": ' }}\n"
    "                {%- if tool_call.arguments is string %}\n"
    "                    {{- tool_call.arguments }}\n"
    "                {%- else %}\n"
    "                    {{- tool_call.arguments | tojson }}\n"
    "                {%- endif %}\n"
    "                {{- '}\\n</tool_call>' }}\n"
    "            {%- endfor %}\n"
    "        {%- endif %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if loop.first or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
    "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n";

TEST(chat_qwen3_template_enable_thinking) {
    const char *msgs =
        "[{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"hi\"},"
        " {\"role\": \"assistant\", \"content\": \"<think>\\nr\\n</think>\\n\\nok\"},"
        " {\"role\": \"user\", \"content\": \"again\"}]";
    cpulm_chat_params p = cpulm_chat_default_params();
    p.add_generation_prompt = 1;
    char *out = NULL;
    cpulm_error err = {0};
    const char *base = "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                       "<|im_start|>assistant\nok<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n"
                       "<|im_start|>assistant\n";
    REQUIRE(t, cpulm_chat_render_json(qwen3_template, msgs, &p, &out, &err) == CPULM_OK);
    CHECK(t, strcmp(out, base) == 0);
    free(out);
    p.enable_thinking = 0;
    REQUIRE(t, cpulm_chat_render_json(qwen3_template, msgs, &p, &out, &err) == CPULM_OK);
    size_t nb = strlen(base);
    CHECK(t, strncmp(out, base, nb) == 0 && strcmp(out + nb, "<think>\n\n</think>\n\n") == 0);
    CHECK(t, !cpulm_chat_opens_think(out, strlen(out)));
    free(out);
    /* the reasoning of a turn after the last user message is kept, re-wrapped */
    const char *tail =
        "[{\"role\": \"user\", \"content\": \"q\"},"
        " {\"role\": \"assistant\", \"content\": \"<think>\\nr\\n</think>\\n\\nok\"}]";
    p.add_generation_prompt = 0;
    REQUIRE(t, cpulm_chat_render_json(qwen3_template, tail, &p, &out, &err) == CPULM_OK);
    CHECK(t, strcmp(out, "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nr\n</"
                         "think>\n\nok<|im_end|>\n") == 0);
    free(out);
}

/* Template idioms over an OpenAI-style conversation with tool calls; expectations are Jinja2
 * 3.1's output (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks). */
TEST(chat_jinja_conversation_idioms) {
    const char *vars = "{\"messages\": [{\"role\": \"system\", \"content\": \" Sys \\n\"}, "
                       "{\"role\": \"user\", \"content\": \"Hi\"},"
                       " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": "
                       "\"function\", \"function\":"
                       " {\"name\": \"f\", \"arguments\": {\"a\": 1, \"b\": [true, null, 2.5]}}}]},"
                       " {\"role\": \"tool\", \"content\": \"{\\\"r\\\": 1}\"}, {\"role\": "
                       "\"assistant\", \"content\": \"<think>x</think>\\n\\nok\"}],"
                       " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", "
                       "\"parameters\": {\"type\": \"object\"}}}],"
                       " \"add_generation_prompt\": true}";
    static const struct {
        const char *src, *want;
    } cases[] = {
        {"{% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments | "
         "tojson }}{% endif %}{% endfor %}",
         "{\"a\": 1, \"b\": [true, null, 2.5]}"},
        {"{{ tools | tojson(indent=4) }}",
         "[\n    {\n        \"type\": \"function\",\n        \"function\": {\n            "
         "\"name\": \"f\",\n"
         "            \"parameters\": {\n                \"type\": \"object\"\n            }\n     "
         "   }\n    }\n]"},
        {"{% for m in messages %}\n  {% if m['role'] == 'user' %}\n    U{{ loop.index }}\n  {% "
         "elif m['role'] == 'assistant' %}\n"
         "    A\n  {% else %}\n    O\n  {% endif %}\n{% endfor %}\n",
         "    O\n    U2\n    A\n    O\n    A\n"},
        {"{%- for m in messages -%}\n{{- m.content | string | trim -}}\n{%- endfor -%}",
         "SysHiNone{\"r\": 1}<think>x</think>\n\nok"},
        {"{{ messages[1:3] | length }} {{ messages[-1].content.split('</think>')[-1] | trim }}",
         "2 ok"},
        {"{% if messages[2].content is none %}none{% endif %} {{ messages[2].content }} {{ "
         "messages[2].tool_calls | length }}",
         "none None 1"},
        {"{{ messages[0] }}", "{'role': 'system', 'content': ' Sys \\n'}"},
        {"{{ 'x' if messages else 'y' }} {{ messages|length > 2 and 'big' or 'small' }}", "x big"},
        {"  {% for i in range(3) -%}\n  [{{ i }}]\n  {%- endfor %}\nend\n", "[0][1][2]end"},
        {"{{ 10 / 4 }} {{ 2 ** 0.5 }} {{ 1e-5 }} {{ 123456789.0 * 10 }} {{ 1/3 }}",
         "2.5 1.4142135623730951 1e-05 1234567890.0 0.3333333333333333"},
        {"{% macro m(a, b=2) -%}\n{{ a }}-{{ b }}\n{%- endmacro %}{{ m(1) }}{{ m(1, b=3) }}{{ "
         "m(b=5, a=4) }}",
         "1-21-34-5"},
        {"{%- if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% "
         "endif %}{{ add_generation_prompt }}",
         "True"},
        {"{{ [1,2,3,4,5][1:4:2] }} {{ [1,2,3,4,5][::-2] }} {{ 'abcdef'[-3:] }} {{ [1,2,3][-10:2] "
         "}}",
         "[2, 4] [5, 3, 1] def [1, 2]"},
        {"{{ 7 % -3 }} {{ -7 % -3 }} {{ 7.5 % 2 }} {{ -1.5 // 1 }} {{ 3 * 1.0 }} {{ true + 1 }}",
         "-2 -1 1.5 -2.0 3.0 2"},
        {"a\n{% if true %}\n  b\n{% endif %}\n  {% if true %}c{% endif %}\n{# x #}\n  d",
         "a\n  b\nc  d"},
        {"{{ '\\u0041\\x42\\103\\\\d' }}", "ABC\\d"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        expect_syn(t, cases[i].src, vars, NULL, cases[i].want);
}

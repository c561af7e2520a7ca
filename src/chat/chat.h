/* chat.h: applying chat templates to conversations (the public cpulm_chat_* API lives in
 * cpulm.h). Internal entry point for callers that already hold a JSON DOM of the variables
 * (the server's parsed request) and for tests that pin the clock. */
#ifndef CPULM_CHAT_CHAT_H
#define CPULM_CHAT_CHAT_H

#include "base/json.h"
#include "chat/jinja.h"

/* Renders tmpl (NULL/"": the "plain" built-in) with the members of vars (a JSON object) as
 * variables; falls back to the built-in of the detected family when tmpl does not parse or
 * uses an unsupported feature. *out: owned, free(); NULL on error. opts NULL: defaults. */
cpulm_status cpulm_chat_render_vars(const char *tmpl, const cpulm_json *vars,
                                    const cpulm_jinja_opts *opts, char **out, cpulm_error *err);

#endif

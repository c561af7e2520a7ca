/* version.c: the library's version string, with the git commit it was built from. */
#include "cpulm.h"

#include "cpulm_commit.h" /* generated at build time by cmake/version.cmake */

#ifndef CPULM_VERSION_STR
#define CPULM_VERSION_STR "0.0.0"
#endif

const char *cpulm_version(void) {
#ifdef CPULM_COMMIT_STR
    return CPULM_VERSION_STR " (" CPULM_COMMIT_STR ")";
#else
    return CPULM_VERSION_STR; /* built outside a git checkout */
#endif
}

/* version.c: the library's version string, with the git commit it was built from. */
#include "cpulm.h"

#ifndef CPULM_VERSION_STR
#define CPULM_VERSION_STR "0.0.0"
#endif
#ifndef CPULM_COMMIT_STR
#define CPULM_COMMIT_STR "unknown"
#endif

const char *cpulm_version(void) {
    return CPULM_VERSION_STR " (" CPULM_COMMIT_STR ")";
}

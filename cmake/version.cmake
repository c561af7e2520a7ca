# version.cmake: writes OUT, a header that defines CPULM_COMMIT_STR as `git describe` of SRC
# (the commit being built, "-dirty" with uncommitted changes). Run by the cpulm_version target
# at every build (cmake -P), not at configure time, so a binary names the commit it was built
# from; OUT is rewritten only when its text changes, so version.c recompiles (and the binaries
# relink) only then. Without git or outside a checkout it defines nothing and cpulm_version()
# is the project version alone.
execute_process(COMMAND git describe --always --dirty
                WORKING_DIRECTORY "${SRC}"
                OUTPUT_VARIABLE desc OUTPUT_STRIP_TRAILING_WHITESPACE
                ERROR_QUIET RESULT_VARIABLE rc)
if(rc STREQUAL "0" AND desc MATCHES "^[0-9A-Za-z._+-]+$")
  set(text "#define CPULM_COMMIT_STR \"${desc}\"\n")
else()
  set(text "/* no git checkout at build time: the version is the project's alone */\n")
endif()
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()

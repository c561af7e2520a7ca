# Generates test_list.h (an X-macro of every TEST(name) in the given sources, with its group),
# so test files can be added without editing a shared list. Run at build time:
# cmake -DOUT=.. -DSRCS=.. -P. The group of a test is its file's stem without "test_"
# (tests/test_kern_pack.c -> kern_pack); every test's name must start with "<group>_", so a
# name says where the test lives and `cpulm-tests <group>` runs exactly that file's tests.
string(REPLACE "|" ";" SRCS "${SRCS}")
set(body "#define TEST_LIST(X)")
foreach(src IN LISTS SRCS)
  get_filename_component(stem "${src}" NAME_WE)
  string(REGEX REPLACE "^test_" "" group "${stem}")
  file(STRINGS "${src}" lines REGEX "^TEST\\(([a-z0-9_]+)\\)")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^TEST\\(([a-z0-9_]+)\\).*" "\\1" name "${line}")
    string(FIND "${name}" "${group}_" at)
    if(NOT at EQUAL 0)
      message(FATAL_ERROR "${src}: TEST(${name}) must be named ${group}_*")
    endif()
    string(APPEND body " \\\n    X(${group}, ${name})")
  endforeach()
endforeach()
string(APPEND body "\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
else()
  set(old "")
endif()
if(NOT old STREQUAL body)
  file(WRITE "${OUT}" "${body}")
endif()

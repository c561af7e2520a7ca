# Test-only: the x86 avx512* kernel files of cmake/kernels.cmake built a second time with the
# avx2 level's flags and SIMDe's AVX-512 emulation (tests/emu/simde_avx512.h, forced include),
# so the tests can compare the avx512 / avx512vnni tables with generic on CPUs without
# AVX-512 (tests/levels.c). Linked into cpulm-tests only, never into libcpulm or cpulm.
# The objects' external symbols get an _emu suffix (cmake/emu_rename.cmake) so they link
# next to the native ones. Without SIMDe (scripts/deps.sh installs libsimde-dev) the
# emulated levels are reported as not checked by the emu512 test group.
if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64" OR CMAKE_CROSSCOMPILING)
  return()
endif()
option(CPULM_EMU512 "test the avx512 levels under SIMDe emulation (needs libsimde-dev)" ON)
# -O1 with SIMDe's functions out of line (SIMDE_NO_INLINE in the header): the fully unrolled
# K-quant tiles of avx512vnni.c take minutes and gigabytes at -O2 with SIMDe inlined (gcc 12:
# 43 s at -O1 out of line). -O0 does not build: gcc's headers then make some intrinsics
# macros around native AVX-512 builtins.
set(CPULM_EMU512_OPT "-O1" CACHE STRING "optimization of the emulated avx512 objects")
find_path(CPULM_SIMDE_INCLUDE simde/x86/avx512.h)
if(NOT CPULM_EMU512)
  message(STATUS "emulated avx512 levels: off (CPULM_EMU512=OFF)")
  return()
endif()
if(NOT CPULM_SIMDE_INCLUDE)
  message(WARNING "SIMDe not found (scripts/deps.sh installs libsimde-dev): the avx512 kernel "
                  "levels will NOT be checked on CPUs without AVX-512 (test group emu512 "
                  "reports them as not checked)")
  return()
endif()

# The avx512* files and the avx2 level's flags, from the one list.
set(emu_srcs "")
set(emu_flags "")
foreach(entry IN LISTS CPULM_X86_KERNELS)
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 file)
  list(GET parts 1 flagstr)
  get_filename_component(stem ${file} NAME_WE)
  if(stem STREQUAL "avx2")
    separate_arguments(emu_flags UNIX_COMMAND "${flagstr}")
  elseif(stem MATCHES "^avx512")
    list(APPEND emu_srcs ${file})
  endif()
endforeach()
if(NOT emu_flags OR NOT emu_srcs)
  message(FATAL_ERROR "cmake/emu512.cmake: no avx2 entry or no avx512* file in CPULM_X86_KERNELS")
endif()

# Each file through a one-line wrapper: the real path carries the avx512 flags as a source
# property (cmake/kernels.cmake) in every target of this directory.
set(emu_wrappers "")
foreach(file IN LISTS emu_srcs)
  get_filename_component(stem ${file} NAME_WE)
  set(w ${CMAKE_BINARY_DIR}/emu512/src/${stem}.c)
  file(CONFIGURE OUTPUT ${w} CONTENT "#include \"${CMAKE_SOURCE_DIR}/${file}\"\n")
  list(APPEND emu_wrappers ${w})
endforeach()
add_library(cpulm_emu512_obj OBJECT ${emu_wrappers})
separate_arguments(emu_opt UNIX_COMMAND "${CPULM_EMU512_OPT}")
target_compile_options(cpulm_emu512_obj PRIVATE ${emu_flags} ${emu_opt} -Wno-psabi
                       -include ${CMAKE_SOURCE_DIR}/tests/emu/simde_avx512.h)
target_include_directories(cpulm_emu512_obj PRIVATE src include)
target_include_directories(cpulm_emu512_obj SYSTEM PRIVATE ${CPULM_SIMDE_INCLUDE})

# The shims' unit test (tests/emu/shim_check.c), built the same way.
add_library(cpulm_emu512_shims OBJECT tests/emu/shim_check.c)
target_compile_options(cpulm_emu512_shims PRIVATE ${emu_flags} ${emu_opt} -Wno-psabi
                       -include ${CMAKE_SOURCE_DIR}/tests/emu/simde_avx512.h)
target_include_directories(cpulm_emu512_shims SYSTEM PRIVATE ${CPULM_SIMDE_INCLUDE})
target_compile_definitions(cpulm_emu512_shims PRIVATE _GNU_SOURCE)

set(emu_dir ${CMAKE_BINARY_DIR}/emu512)
set(emu_outs "")
foreach(file IN LISTS emu_srcs)
  get_filename_component(stem ${file} NAME_WE)
  list(APPEND emu_outs ${emu_dir}/${stem}_emu.o)
endforeach()
add_custom_command(
  OUTPUT ${emu_outs}
  COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} -DOBJCOPY=${CMAKE_OBJCOPY} -DOUTDIR=${emu_dir}
          "-DOBJS=$<JOIN:$<TARGET_OBJECTS:cpulm_emu512_obj>,|>" -P ${CMAKE_SOURCE_DIR}/cmake/emu_rename.cmake
  DEPENDS cpulm_emu512_obj $<TARGET_OBJECTS:cpulm_emu512_obj>
          ${CMAKE_SOURCE_DIR}/cmake/emu_rename.cmake
  COMMENT "emulated avx512 objects: symbols renamed *_emu" VERBATIM)
set_source_files_properties(${emu_outs} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
target_sources(cpulm-tests PRIVATE ${emu_outs} $<TARGET_OBJECTS:cpulm_emu512_shims>)
target_compile_definitions(cpulm-tests PRIVATE CPULM_TEST_EMU512=1)

# extra_tests.cmake: fuzz targets and their corpus-replay tests (included by CMakeLists.txt).
#
# fuzz_gguf is always built in replay mode (tests/fuzz/fuzz_main.c feeds it files), and ctest
# runs it over the seed corpus. With clang and -DCPULM_FUZZ=ON, fuzz_gguf_libfuzzer is built
# with -fsanitize=fuzzer,address,undefined for real fuzzing:
#   ./build/fuzz_gguf_libfuzzer -max_total_time=300 tests/fuzz/corpus/gguf
# gen_gguf_corpus regenerates the writer-made seeds: ./build/gen_gguf_corpus tests/fuzz/corpus/gguf

option(CPULM_FUZZ "build libFuzzer targets (clang only)" OFF)

add_executable(fuzz_gguf tests/fuzz/fuzz_gguf.c tests/fuzz/fuzz_main.c)
target_include_directories(fuzz_gguf PRIVATE src)
target_link_libraries(fuzz_gguf cpulm)
add_test(NAME fuzz_gguf_replay
         COMMAND fuzz_gguf ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/gguf)
set_tests_properties(fuzz_gguf_replay PROPERTIES TIMEOUT 120)

# Other replay-mode fuzz targets: tests/fuzz/fuzz_<name>.c over tests/fuzz/corpus/<name>/.
foreach(name json http)
  if(EXISTS ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_${name}.c)
    add_executable(fuzz_${name} tests/fuzz/fuzz_${name}.c tests/fuzz/fuzz_main.c)
    target_include_directories(fuzz_${name} PRIVATE src)
    target_link_libraries(fuzz_${name} cpulm_server cpulm)
    add_test(NAME fuzz_${name}_replay
             COMMAND fuzz_${name} ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/${name})
    set_tests_properties(fuzz_${name}_replay PROPERTIES TIMEOUT 120)
  endif()
endforeach()

add_executable(gen_gguf_corpus tests/fuzz/gen_gguf_corpus.c)
target_include_directories(gen_gguf_corpus PRIVATE src)
target_link_libraries(gen_gguf_corpus cpulm)

if(CPULM_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "CPULM_FUZZ=ON needs clang (libFuzzer)")
  endif()
  # The library is rebuilt from the same sources with fuzzer instrumentation, so coverage
  # guides into gguf.c whatever CPULM_SANITIZE the main build uses.
  set(fuzz_flags -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -g -O1)
  add_executable(fuzz_gguf_libfuzzer tests/fuzz/fuzz_gguf.c src/gguf.c src/gguf_write.c
                 src/base/status.c)
  target_sources(fuzz_gguf_libfuzzer PRIVATE src/quant.c)
  target_include_directories(fuzz_gguf_libfuzzer PRIVATE src include)
  target_compile_options(fuzz_gguf_libfuzzer PRIVATE ${fuzz_flags})
  target_link_options(fuzz_gguf_libfuzzer PRIVATE ${fuzz_flags})
  target_link_libraries(fuzz_gguf_libfuzzer m)
endif()

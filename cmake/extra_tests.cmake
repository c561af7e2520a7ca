# extra_tests.cmake: fuzz targets and their corpus-replay tests (included by CMakeLists.txt).
#
# fuzz_gguf, fuzz_json, fuzz_http, fuzz_chunked and fuzz_grammar are always built in replay mode
# (tests/fuzz/fuzz_main.c feeds them files), and ctest runs them over the seed corpus. With clang and
# -DCPULM_FUZZ=ON, fuzz_<name>_libfuzzer is built with -fsanitize=fuzzer,address,undefined for
# real fuzzing, and ctest runs each for 5 s (fuzz_<name>_short); long runs (docs/SECURITY.md):
#   ./build-fuzz/fuzz_http_libfuzzer -runs=10000000 scratch tests/fuzz/corpus/http
# gen_gguf_corpus regenerates the writer-made seeds: ./build/gen_gguf_corpus tests/fuzz/corpus/gguf

option(CPULM_FUZZ "build libFuzzer targets (clang only)" OFF)

add_executable(fuzz_gguf tests/fuzz/fuzz_gguf.c tests/fuzz/fuzz_main.c)
target_include_directories(fuzz_gguf PRIVATE src)
target_link_libraries(fuzz_gguf cpulm)
add_test(NAME fuzz_gguf_replay
         COMMAND fuzz_gguf ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/gguf)
set_tests_properties(fuzz_gguf_replay PROPERTIES TIMEOUT 120)

# Other replay-mode fuzz targets: tests/fuzz/fuzz_<name>.c over tests/fuzz/corpus/<name>/.
foreach(name json http chunked grammar)
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
    message(FATAL_ERROR "CPULM_FUZZ=ON needs clang (libFuzzer: Debian's libclang-rt-NN-dev)")
  endif()
  # Each target is built from the sources it exercises, compiled again with fuzzer
  # instrumentation, so coverage guides into them whatever CPULM_SANITIZE the main build
  # uses. CI (scripts/test.sh) runs each for a few seconds; docs/SECURITY.md has the long
  # runs and their counts.
  set(fuzz_flags -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -g -O1)
  set(fuzz_gguf_sources src/format/gguf.c src/format/gguf_write.c src/format/quant.c
                         src/format/quant_k.c src/base/status.c)
  set(fuzz_json_sources src/base/json.c src/base/buf.c src/base/status.c)
  set(fuzz_http_sources src/server/http.c src/server/conn.c src/base/buf.c src/base/status.c)
  set(fuzz_chunked_sources src/server/http.c)
  file(GLOB fuzz_grammar_sources ${CMAKE_SOURCE_DIR}/src/grammar/*.c)
  list(APPEND fuzz_grammar_sources src/base/json.c src/base/buf.c src/base/status.c)
  foreach(name gguf json http chunked grammar)
    add_executable(fuzz_${name}_libfuzzer tests/fuzz/fuzz_${name}.c ${fuzz_${name}_sources})
    target_include_directories(fuzz_${name}_libfuzzer PRIVATE src include)
    target_compile_options(fuzz_${name}_libfuzzer PRIVATE ${fuzz_flags})
    target_link_options(fuzz_${name}_libfuzzer PRIVATE ${fuzz_flags})
    target_link_libraries(fuzz_${name}_libfuzzer m Threads::Threads)
    # A short real fuzzing run (seconds) on top of the corpus replay; its new inputs go to
    # a scratch directory so the checked-in corpus stays as it is.
    add_test(NAME fuzz_${name}_short
             COMMAND sh -c "mkdir -p fuzz-${name}-scratch && exec $<TARGET_FILE:fuzz_${name}_libfuzzer> -max_total_time=5 -rss_limit_mb=2048 fuzz-${name}-scratch ${CMAKE_SOURCE_DIR}/tests/fuzz/corpus/${name}")
    set_tests_properties(fuzz_${name}_short PROPERTIES TIMEOUT 120 LABELS fuzz)
  endforeach()
  # the grammar sources reference the model API only in vocab.c's model reader, never called
  # and the matcher's work limit is lowered (2^18 units per call instead of 2^23): inputs that
  # reach it take milliseconds, not a second, under the sanitizers; the paths are the same
  target_compile_definitions(fuzz_grammar_libfuzzer PRIVATE FUZZ_GRAMMAR_STANDALONE
                             CPULM_GRAMMAR_MAX_WORK=262144)
endif()

# Constrained output from the command line (tests/grammar_cli_test.sh): run --json-schema,
# --grammar, --grammar-file, usage errors, and a grammar-bench smoke run.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME grammar_cli COMMAND ${CMAKE_SOURCE_DIR}/tests/grammar_cli_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(grammar_cli PROPERTIES TIMEOUT 300 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
# The JSON-schema property test (tests/schema_prop_test.sh): random schemas from the
# supported keyword set, outputs sampled under each grammar, every output validated by ajv
# (npm, installed into the build tree; the test is skipped, 77, when npm is unreachable).
# cpulm-schema-prop MODEL --count N --seed S writes the lines; a larger run is a tool use:
#   ./build/cpulm-schema-prop ../shared/models/stories260K.gguf --count 5000 |
#     node tests/schema_prop_check.mjs build/npm-ajv 5000
add_executable(cpulm-schema-prop tests/schema_prop.c)
target_include_directories(cpulm-schema-prop PRIVATE src include)
target_link_libraries(cpulm-schema-prop cpulm)
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME schema_prop COMMAND ${CMAKE_SOURCE_DIR}/tests/schema_prop_test.sh
           $<TARGET_FILE:cpulm-schema-prop>)
  set_tests_properties(schema_prop PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED};CPULM_NPM_DIR=${CMAKE_BINARY_DIR}/npm-ajv")
endif()

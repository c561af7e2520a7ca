# Constrained output from the command line (tests/grammar_cli_test.sh): run --json-schema,
# --grammar, --grammar-file, usage errors, and a grammar-bench smoke run.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME grammar_cli COMMAND ${CMAKE_SOURCE_DIR}/tests/grammar_cli_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(grammar_cli PROPERTIES TIMEOUT 300 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()

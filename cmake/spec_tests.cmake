# Speculative decoding from the command line (tests/spec_cli_test.sh): run --spec ngram and
# -md (a draft quantized on the fly) give the plain output byte for byte, statistics, usage
# errors, and bench's --spec columns.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME spec_cli COMMAND ${CMAKE_SOURCE_DIR}/tests/spec_cli_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(spec_cli PROPERTIES TIMEOUT 300 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()

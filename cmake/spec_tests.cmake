# Speculative decoding from the command line (tests/spec_cli_test.sh): run --spec ngram and
# -md (a draft quantized on the fly) give the plain output byte for byte, statistics, usage
# errors, and bench's --spec columns.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME spec_cli COMMAND ${CMAKE_SOURCE_DIR}/tests/spec_cli_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(spec_cli PROPERTIES TIMEOUT 300 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
# Speculative decoding in `cpulm serve` (tests/spec_server_test.sh): with 8 concurrent
# requests, --spec ngram and -md give the plain server's texts byte for byte (greedy and
# seeded sampling, streamed), the vLLM spec_decode metrics, draft_n / draft_n_accepted in
# responses, the per-request opt-out, and refused configurations.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME spec_server COMMAND ${CMAKE_SOURCE_DIR}/tests/spec_server_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(spec_server PROPERTIES TIMEOUT 300 LABELS server
                       ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
# A failed decode or speculative step in `run` / `chat` is an error (message, exit 1), a full
# context a normal stop (tests/gen_errors_test.sh over cpulm-faults, cmake/cli.cmake).
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME gen_errors COMMAND ${CMAKE_SOURCE_DIR}/tests/gen_errors_test.sh $<TARGET_FILE:cpulm-faults>)
  set_tests_properties(gen_errors PROPERTIES TIMEOUT 120 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()

# End-to-end tests of the model-file commands: quantize (byte-identical to llama.cpp's
# quantizer), perplexity, and pull against a local HTTP server (tests/cli_model_test.sh).
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME cli_model COMMAND ${CMAKE_SOURCE_DIR}/tests/cli_model_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(cli_model PROPERTIES TIMEOUT 300 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()

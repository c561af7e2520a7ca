# tools4: libcurl for `cpulm pull`, and the end-to-end tests of quantize / perplexity / pull.
# Without libcurl the command still builds and says at run time that it cannot download.
find_package(CURL QUIET)
if(CURL_FOUND)
  target_link_libraries(cpulm-cli CURL::libcurl)
  target_compile_definitions(cpulm-cli PRIVATE CPULM_HAVE_CURL=1)
else()
  message(STATUS "libcurl not found: `cpulm pull` will be built without download support")
endif()

if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME tools4 COMMAND ${CMAKE_SOURCE_DIR}/tests/tools4_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(tools4 PROPERTIES TIMEOUT 300 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()

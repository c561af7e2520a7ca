# The cpulm command (tools/): one file per subcommand over the engine and server libraries.
# libcurl serves `cpulm pull`; without it the command still builds and says at run time that
# it cannot download.
file(GLOB CPULM_TOOL_SOURCES CONFIGURE_DEPENDS tools/*.c)
add_executable(cpulm-cli ${CPULM_TOOL_SOURCES})
set_target_properties(cpulm-cli PROPERTIES OUTPUT_NAME cpulm)
target_include_directories(cpulm-cli PRIVATE src)
target_link_libraries(cpulm-cli cpulm_server cpulm)

find_package(CURL QUIET)
if(CURL_FOUND)
  target_link_libraries(cpulm-cli CURL::libcurl)
  target_compile_definitions(cpulm-cli PRIVATE CPULM_HAVE_CURL=1)
else()
  message(STATUS "libcurl not found: `cpulm pull` will be built without download support")
endif()

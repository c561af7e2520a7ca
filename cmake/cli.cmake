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

# libedit (Debian libedit-dev, BSD licence) gives `cpulm chat` line editing and history on a
# terminal; without it chat reads plain lines (see docs/ARCHITECTURE.md, "Dependencies").
find_path(CPULM_EDITLINE_INCLUDE editline/readline.h)
find_library(CPULM_EDITLINE_LIB edit)
if(CPULM_EDITLINE_INCLUDE AND CPULM_EDITLINE_LIB)
  target_compile_definitions(cpulm-cli PRIVATE CPULM_HAVE_LIBEDIT=1)
  target_include_directories(cpulm-cli PRIVATE ${CPULM_EDITLINE_INCLUDE})
  target_link_libraries(cpulm-cli ${CPULM_EDITLINE_LIB})
  message(STATUS "cpulm chat: libedit line editing (${CPULM_EDITLINE_LIB})")
else()
  message(STATUS "cpulm chat: libedit not found, plain line reads (apt install libedit-dev)")
endif()

# `cmake --install build [--prefix DIR]` puts the command and its data in place (plan and
# report find the price table in ../share/cpulm next to the executable).
include(GNUInstallDirs)
install(TARGETS cpulm-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES data/prices.tsv DESTINATION ${CMAKE_INSTALL_DATADIR}/cpulm)
install(FILES README.md docs/ARCHITECTURE.md docs/BENCHMARKING.md docs/CORRECTNESS.md
              docs/PERFORMANCE.md docs/SERVER.md docs/TOOLS.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/perf-log DESTINATION ${CMAKE_INSTALL_DOCDIR})

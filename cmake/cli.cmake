# The cpulm command (tools/): one file per subcommand over the engine and server libraries.
# libcurl serves `cpulm pull`; without it the command still builds and says at run time that
# it cannot download. The objects are compiled once, for the command and for cpulm-faults.
file(GLOB CPULM_TOOL_SOURCES CONFIGURE_DEPENDS tools/*.c)
add_library(cpulm_cli_obj OBJECT ${CPULM_TOOL_SOURCES})
target_include_directories(cpulm_cli_obj PRIVATE src)
target_link_libraries(cpulm_cli_obj PUBLIC cpulm_server cpulm) # their include paths
set(cpulm_cli_libs cpulm_server cpulm)

find_package(CURL QUIET)
if(CURL_FOUND)
  list(APPEND cpulm_cli_libs CURL::libcurl)
  target_compile_definitions(cpulm_cli_obj PRIVATE CPULM_HAVE_CURL=1)
else()
  message(STATUS "libcurl not found: `cpulm pull` will be built without download support")
endif()

# libedit (Debian libedit-dev, BSD licence) gives `cpulm chat` line editing and history on a
# terminal; without it chat reads plain lines (see docs/ARCHITECTURE.md, "Dependencies").
find_path(CPULM_EDITLINE_INCLUDE editline/readline.h)
find_library(CPULM_EDITLINE_LIB edit)
if(CPULM_EDITLINE_INCLUDE AND CPULM_EDITLINE_LIB)
  target_compile_definitions(cpulm_cli_obj PRIVATE CPULM_HAVE_LIBEDIT=1)
  target_include_directories(cpulm_cli_obj PRIVATE ${CPULM_EDITLINE_INCLUDE})
  list(APPEND cpulm_cli_libs ${CPULM_EDITLINE_LIB})
  message(STATUS "cpulm chat: libedit line editing (${CPULM_EDITLINE_LIB})")
else()
  message(STATUS "cpulm chat: libedit not found, plain line reads (apt install libedit-dev)")
endif()

add_executable(cpulm-cli $<TARGET_OBJECTS:cpulm_cli_obj>)
set_target_properties(cpulm-cli PROPERTIES OUTPUT_NAME cpulm)
target_link_libraries(cpulm-cli ${cpulm_cli_libs})

# Test-only: the same objects with cpulm_ctx_decode and cpulm_spec_step wrapped by
# tests/fault_wrap.c (CPULM_FAULT=FN:N:STATUS fails the Nth call), so the command-line tests
# reach the error paths of the generation loops without a hook in the shipped command.
if(NOT CMAKE_CROSSCOMPILING)
  add_executable(cpulm-faults $<TARGET_OBJECTS:cpulm_cli_obj> tests/fault_wrap.c)
  target_include_directories(cpulm-faults PRIVATE src)
  target_link_libraries(cpulm-faults ${cpulm_cli_libs})
  target_link_options(cpulm-faults PRIVATE -Wl,--wrap=cpulm_ctx_decode,--wrap=cpulm_spec_step)
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

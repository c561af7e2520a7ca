# End-to-end tests of the cpulm command (shell scripts driving the built binary).
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME cli COMMAND ${CMAKE_SOURCE_DIR}/tests/cli_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(cli PROPERTIES TIMEOUT 300 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
# Scale-out with existing tools: two replicas behind a real nginx (deploy/nginx.conf).
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME deploy COMMAND ${CMAKE_SOURCE_DIR}/tests/deploy_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(deploy PROPERTIES TIMEOUT 300 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
# Kubernetes manifests (deploy/k8s, deploy/llm-d, deploy/kserve): parsed, cross-checked, and
# each one's cpulm arguments started for real; needs python3 with yaml (scripts/deps.sh).
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME manifests COMMAND python3 ${CMAKE_SOURCE_DIR}/tests/manifests_test.py $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(manifests PROPERTIES TIMEOUT 300 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
# `cpulm chat`: piped and on a terminal (tmux), a conversation 10x its context.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME chat_cli COMMAND ${CMAKE_SOURCE_DIR}/tests/chat_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(chat_cli PROPERTIES TIMEOUT 300 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
# cmake --install into a temporary prefix: the installed cpulm runs and finds its price table.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME install COMMAND ${CMAKE_SOURCE_DIR}/tests/install_test.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(install PROPERTIES TIMEOUT 120 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
# every subcommand with every flag at boundary values, and every shared model: no abort.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME flag_fuzz COMMAND ${CMAKE_SOURCE_DIR}/tests/flag_fuzz.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(flag_fuzz PROPERTIES TIMEOUT 600 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
# every `cpulm ...` command shown in README.md and docs/*.md runs (with small models).
find_program(CPULM_PYTHON3 python3)
if(NOT CMAKE_CROSSCOMPILING AND CPULM_PYTHON3)
  add_test(NAME doc_commands COMMAND ${CPULM_PYTHON3} ${CMAKE_SOURCE_DIR}/tests/doc_commands_test.py
                                     ${CMAKE_SOURCE_DIR} $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(doc_commands PROPERTIES TIMEOUT 900 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
# llama.cpp users' command lines (its README, llama-bench's README): run or fail clearly.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME migrate COMMAND ${CMAKE_SOURCE_DIR}/tests/migrate_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(migrate PROPERTIES TIMEOUT 600 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
# `cpulm --version` names the commit of the build (cmake/version.cmake, run at build time).
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME version COMMAND ${CMAKE_SOURCE_DIR}/tests/version_test.sh $<TARGET_FILE:cpulm-cli>
                                ${CMAKE_SOURCE_DIR} ${CMAKE_COMMAND})
  set_tests_properties(version PROPERTIES TIMEOUT 60)
endif()

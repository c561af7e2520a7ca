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
# `cpulm chat`: piped and on a terminal (tmux), a conversation 10x its context.
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME chat_cli COMMAND ${CMAKE_SOURCE_DIR}/tests/chat_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(chat_cli PROPERTIES TIMEOUT 300 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()

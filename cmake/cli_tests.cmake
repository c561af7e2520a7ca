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

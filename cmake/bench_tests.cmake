# Tests of the bench tools (bench, roofline, plan, report). Their pure parts (sweeps,
# statistics, plan arithmetic, price table, SVG, JSON output, --compare, the roofline's work
# counts) are compiled into cpulm-tests as well, so tests/test_bench.c can call them;
# tests/bench_test.sh drives the built command end to end on the small shared models.
target_sources(cpulm-tests PRIVATE tools/bench_sweep.c tools/bench_stats.c tools/bench_plan.c
               tools/svg.c tools/bench_out.c tools/bench_compare.c tools/bench_roof.c
               tools/workload.c tools/loadtest_stats.c tools/loadtest_host.c tools/perf_model.c tools/perf_model_sim.c tools/compare.c
               tools/textfile.c)
target_include_directories(cpulm-tests PRIVATE tools)
target_compile_definitions(cpulm-tests PRIVATE
                           CPULM_PRICES_TSV="${CMAKE_SOURCE_DIR}/data/prices.tsv"
                           CPULM_WORKLOADS_DIR="${CMAKE_SOURCE_DIR}/data/workloads"
                           CPULM_INSTANCES_TSV="${CMAKE_SOURCE_DIR}/data/instances.tsv"
                           CPULM_FIXTURES_DIR="${CMAKE_SOURCE_DIR}/tests/fixtures")
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME bench_cli COMMAND ${CMAKE_SOURCE_DIR}/tests/bench_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(bench_cli PROPERTIES TIMEOUT 300 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
if(NOT CMAKE_CROSSCOMPILING)
  # cpulm loadtest against cpulm serve: workloads, open/closed loop, SLO search, failures
  add_test(NAME capacity_cli COMMAND ${CMAKE_SOURCE_DIR}/tests/capacity_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(capacity_cli PROPERTIES TIMEOUT 120 ENVIRONMENT "CPULM_SHARED=${CPULM_SHARED}")
endif()
if(NOT CMAKE_CROSSCOMPILING)
  # the performance model against recorded perf-model-check.sh sittings (tests/data/perf-model)
  add_test(NAME perf_model_cli COMMAND ${CMAKE_SOURCE_DIR}/tests/perf_model_recorded_test.sh $<TARGET_FILE:cpulm-cli>)
  set_tests_properties(perf_model_cli PROPERTIES TIMEOUT 60 SKIP_RETURN_CODE 77)
endif()

# Under qemu-aarch64 (cross build): run the kernel tests once per emulated CPU, so
# detection and every ARM level (and SVE at 128, 256 and 512 bits) are checked against
# generic. CPULM_EXPECT_LEVEL / CPULM_EXPECT_SVE_VL make kern_expected_level fail when
# detection picks another level or qemu did not apply the vector length. qemu-user reads
# QEMU_CPU as -cpu. Each entry takes well under a second.
if(CMAKE_CROSSCOMPILING AND CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  # "QEMU_CPU|expected level|SVE bytes|CPULM_ISA"
  set(cpulm_qemu_runs
    "cortex-a53|neon||"                        # armv8.0: no dotprod
    "cortex-a76|dotprod||"                     # dotprod, no i8mm, no SVE
    "max|sve||"                                # everything, qemu's default vector length
    "max,sve-default-vector-length=16|sve|16|"
    "max,sve-default-vector-length=32|sve|32|"
    "max,sve-default-vector-length=64|sve|64|"
    "max|neon||neon")                          # the CPULM_ISA override under qemu
  foreach(run IN LISTS cpulm_qemu_runs)
    string(REPLACE "|" ";" f "${run}")
    list(GET f 0 cpu)
    list(GET f 1 level)
    list(GET f 2 vl)
    list(GET f 3 isa)
    set(env "QEMU_CPU=${cpu}" "CPULM_EXPECT_LEVEL=${level}")
    set(name "kern_qemu_${cpu}")
    if(vl)
      list(APPEND env "CPULM_EXPECT_SVE_VL=${vl}")
    endif()
    if(isa)
      list(APPEND env "CPULM_ISA=${isa}") # set only when forcing: tests read "set" as forced
      string(APPEND name "_isa_${isa}")
    endif()
    string(MAKE_C_IDENTIFIER "${name}" name)
    add_test(NAME ${name} COMMAND cpulm-tests kern kern_pack)
    set_tests_properties(${name} PROPERTIES TIMEOUT 120 LABELS qemu ENVIRONMENT "${env}")
  endforeach()
  # The quant tests run only reference code (no dispatch): once more, on the baseline CPU.
  add_test(NAME quant_qemu_cortex_a53 COMMAND cpulm-tests quant)
  set_tests_properties(quant_qemu_cortex_a53 PROPERTIES TIMEOUT 120 LABELS qemu ENVIRONMENT
    "QEMU_CPU=cortex-a53;CPULM_SHARED=${CPULM_SHARED}")
endif()

# scripts/arm-perf.sh in quick mode (native builds only; about 15 s of CPU): output format,
# markers that leave the code unchanged, no stack traffic in the GEMM / GEMV loops.
# Skipped when llvm-mca-22 or the aarch64 cross compiler is missing (scripts/deps.sh --perf).
if(NOT CMAKE_CROSSCOMPILING)
  add_test(NAME arm_perf COMMAND ${CMAKE_SOURCE_DIR}/tests/arm_perf_test.sh)
  set_tests_properties(arm_perf PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()

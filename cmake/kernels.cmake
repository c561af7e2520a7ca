# The per-ISA kernel translation units and their flags, in one place. Each file is built
# with its own level's flags and reached only through the dispatch table, so one binary
# runs on every CPU of the architecture. Never probes the build host's CPU. Each level also
# has a row in dispatch.c's ladder (its base level and the CPU features its flags assume).
# A level may span files: <level>_<part>.c is built with the level's flags and its functions
# are reached through <level>.c's table.
set(CPULM_X86_KERNELS
  "src/kernels/x86/avx2.c|-mavx2 -mfma -mf16c"
  "src/kernels/x86/avx2_attn.c|-mavx2 -mfma -mf16c"
  "src/kernels/x86/avx2_dnet.c|-mavx2 -mfma -mf16c"
  "src/kernels/x86/avx512.c|-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq"
  "src/kernels/x86/avx512_attn.c|-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq"
  "src/kernels/x86/avx512_dnet.c|-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq"
  "src/kernels/x86/avx512vnni.c|-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni"
  "src/kernels/x86/avx512bf16_attn.c|-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16"
  "src/kernels/x86/avx512bf16_gemm.c|-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16"
  "src/kernels/x86/amx.c|-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mamx-tile -mamx-int8"
  "src/kernels/x86/amx_attn.c|-mavx2 -mfma -mf16c -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mamx-tile -mamx-int8")
set(CPULM_ARM_KERNELS
  "src/kernels/arm/neon.c|-march=armv8-a"
  "src/kernels/arm/neon_attn.c|-march=armv8-a"
  "src/kernels/arm/neon_dnet.c|-march=armv8-a"
  "src/kernels/arm/dotprod.c|-march=armv8.2-a+dotprod"
  "src/kernels/arm/dotprod_attn.c|-march=armv8.2-a+dotprod"
  "src/kernels/arm/i8mm.c|-march=armv8.2-a+dotprod+i8mm"
  "src/kernels/arm/sve.c|-march=armv8.2-a+dotprod+i8mm+sve")

if(CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
  set(kernel_list ${CPULM_X86_KERNELS})
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(kernel_list ${CPULM_ARM_KERNELS})
else()
  set(kernel_list "")
endif()
foreach(entry IN LISTS kernel_list)
  # "file|flag flag ...": flags are space-separated because a ';' inside a list element
  # would split the entry itself
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 0 file)
  list(GET parts 1 flagstr)
  separate_arguments(parts UNIX_COMMAND "${flagstr}")
  # a listed level whose file is missing is a configure error, never a silently absent level
  if(NOT EXISTS ${CMAKE_SOURCE_DIR}/${file})
    message(FATAL_ERROR "cmake/kernels.cmake lists ${file}, which does not exist")
  endif()
  target_sources(cpulm PRIVATE ${file})
  set_source_files_properties(${file} PROPERTIES COMPILE_OPTIONS "${parts}")
  get_filename_component(level ${file} NAME_WE)
  string(REGEX REPLACE "_.*" "" level ${level})
  string(TOUPPER ${level} LEVEL)
  target_compile_definitions(cpulm PRIVATE CPULM_HAVE_${LEVEL}=1)
endforeach()

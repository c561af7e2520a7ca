# cmake -DNM=... -DOBJCOPY=... -DOUTDIR=... -DOBJS="a.c.o|b.c.o" -P emu_rename.cmake
# Copies each emulated object to OUTDIR/<stem>_emu.o with every external symbol DEFINED by
# any of them renamed <name>_emu (the tables, cpulm_avx512_* functions of future
# avx512_<part>.c files, and their references to each other). Undefined references (libc,
# the native avx2 helpers such as cpulm_avx2_*) keep their names. Derived from the objects,
# so a new avx512* file needs no edit here.
string(REPLACE "|" ";" OBJS "${OBJS}")
set(syms "")
foreach(o IN LISTS OBJS)
  execute_process(COMMAND ${NM} --defined-only --extern-only --format=posix ${o}
                  OUTPUT_VARIABLE out RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${o}")
  endif()
  string(REPLACE "\n" ";" lines "${out}")
  foreach(line IN LISTS lines)
    if(line MATCHES "^([^ ]+) [A-Za-z] ")
      list(APPEND syms ${CMAKE_MATCH_1})
    endif()
  endforeach()
endforeach()
list(REMOVE_DUPLICATES syms)
if(NOT syms)
  message(FATAL_ERROR "emu_rename: the emulated objects define no external symbol")
endif()
file(MAKE_DIRECTORY ${OUTDIR})
set(map "")
foreach(s IN LISTS syms)
  string(APPEND map "${s} ${s}_emu\n")
endforeach()
file(WRITE ${OUTDIR}/rename.map "${map}")
foreach(o IN LISTS OBJS)
  get_filename_component(name ${o} NAME)
  string(REGEX REPLACE "\\.c\\.o(bj)?$" "" stem ${name})
  execute_process(COMMAND ${OBJCOPY} --redefine-syms=${OUTDIR}/rename.map ${o}
                          ${OUTDIR}/${stem}_emu.o RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${OBJCOPY} failed on ${o}")
  endif()
endforeach()

# Installs the build into a temporary prefix, then uses it as a user would: a CMake
# project with find_package(dlua), a C program built with pkg-config, the installed
# dlua program, and require("dlua") from stock luajit.
#   cmake -DBUILD=<build dir> -DSRC=<source dir> -DWORK=<scratch dir> -P install_test.cmake
cmake_minimum_required(VERSION 3.20)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "$ ${ARGN}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()

# In a sanitizer build (-DPRELOAD=<the ASan runtime>) the programs built here without
# sanitizers load our instrumented libraries, so ASan is preloaded for them, and only
# for them (compilers and cmake would report leaks of their own).
function(run_program)
  if(PRELOAD)
    set(ENV{LD_PRELOAD} "${PRELOAD}")
  endif()
  run(${ARGN})
  unset(ENV{LD_PRELOAD})
  set(last_output "${last_output}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)
run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${prefix})

# find_package(dlua)
run(${CMAKE_COMMAND} -S ${SRC}/tests/runtime/consumer -B ${WORK}/consumer
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK}/consumer)
set(ENV{LD_LIBRARY_PATH} "${prefix}/lib")
run_program(${WORK}/consumer/consumer)
run_program(${WORK}/consumer/consumer_c)

# An exported graph, made by the installed dlua, run by the installed libdlua_run
# (find_package's dlua::run), by the installed dlua-run, and by a C program built with
# pkg-config's dlua_run flags.
run_program(${prefix}/bin/dlua -e "dl.export(function(x) return (x * 2):sum(2, true) end, { dl.ones(4, 3) }, { path = '${WORK}/sum.dlg', dynamic = { [1] = { 1, 'n' } } })")
run_program(${WORK}/consumer/consumer_run ${WORK}/sum.dlg)
run_program(${prefix}/bin/dlua-run ${WORK}/sum.dlg)

# pkg-config
find_program(PKG_CONFIG pkg-config REQUIRED)
find_program(CC NAMES cc gcc REQUIRED)
set(ENV{PKG_CONFIG_PATH} "${prefix}/lib/pkgconfig")
run(${PKG_CONFIG} --cflags --libs dlua)
string(STRIP "${last_output}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CC} ${SRC}/tests/runtime/consumer/main.c -o ${WORK}/consumer_pc ${flags})
run_program(${WORK}/consumer_pc)
run(${PKG_CONFIG} --cflags --libs dlua_run)
string(STRIP "${last_output}" flags)
separate_arguments(flags UNIX_COMMAND "${flags}")
run(${CC} ${SRC}/tests/runtime/consumer/run.c -o ${WORK}/consumer_run_pc ${flags})
run_program(${WORK}/consumer_run_pc ${WORK}/sum.dlg)

# The installed program and module.
unset(ENV{LD_LIBRARY_PATH})
run_program(${prefix}/bin/dlua -e "assert(dl.ones(3):sum():item() == 3) print('installed dlua ok')")
find_program(LUAJIT luajit)
if(LUAJIT)
  set(ENV{LUA_PATH} "${prefix}/share/lua/5.1/?.lua;${prefix}/share/lua/5.1/?/init.lua;;")
  run_program(${LUAJIT} -e "local dl = require('dlua') assert(dl.ones(2):sum():item() == 2) print('stock luajit ok')")
endif()
file(REMOVE_RECURSE ${WORK})

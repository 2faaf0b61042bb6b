# Fails when an object of a unit that only includes strata headers defines strata code (nm):
# header-only, what a unit does not call must cost it no code generation. A virtual function
# declared in its class without `inline` and defined inline after it is the class's key
# function, and makes every unit emit the vtable and everything the vtable reaches.
# Run as: cmake -DNM=<nm> "-DOBJECTS=<object>|<object>..." -P defines_nothing.cmake
cmake_minimum_required(VERSION 3.20)
string(REPLACE "|" ";" objects "${OBJECTS}")
set(found "")
foreach(object IN LISTS objects)
  execute_process(COMMAND "${NM}" -C --defined-only "${object}" RESULT_VARIABLE status
                  OUTPUT_VARIABLE symbols ERROR_VARIABLE error)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "${NM} -C --defined-only ${object} failed: ${error}")
  endif()
  string(REGEX MATCHALL "[^\n]*strata::[^\n]*" defined "${symbols}")
  if(defined)
    list(LENGTH defined count)
    list(GET defined 0 first)
    get_filename_component(name "${object}" NAME)
    string(APPEND found "  ${name}: ${count} symbols, e.g. ${first}\n")
  endif()
endforeach()
if(found)
  message(FATAL_ERROR "units that only include strata headers define strata code:\n${found}"
                      "find what makes the compiler emit it (a key function: a virtual function "
                      "declared without inline and defined inline outside its class)")
endif()
list(LENGTH objects count)
message(STATUS "${count} units that only include strata headers define no strata code")

# missing.cmake — stands in for a build-hygiene test whose input does not exist yet (cmake -P).
#   cmake -DWHAT=<what is missing> -P missing.cmake
cmake_minimum_required(VERSION 3.25)
message(FATAL_ERROR "cannot run this test yet: ${WHAT} does not exist. "
                    "Add it, then reconfigure (cmake --preset dev).")

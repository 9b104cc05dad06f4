# libFuzzer harnesses for everything Strand parses from outside: HTTP requests, Kafka
# envelopes, definitions and expressions. Included by tests/fuzz/CMakeLists.txt
# (STRAND_FUZZ=ON, clang). scripts/fuzz.sh runs each on tests/fuzz/corpus/<name>/.
foreach(name fuzz_http fuzz_signal fuzz_definition fuzz_expr)
  add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/${name}.c)
  target_compile_options(${name} PRIVATE ${ST_FUZZ_FLAGS})
  target_link_options(${name} PRIVATE ${ST_FUZZ_FLAGS})
  target_link_libraries(${name} PRIVATE strand_runtime strand_engine)
endforeach()

# libFuzzer harnesses for the bytes services take from outside: HTTP requests and
# Kafka envelopes. Included by tests/fuzz/CMakeLists.txt (STRAND_FUZZ=ON, clang).
foreach(name fuzz_http fuzz_signal)
  add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/${name}.c)
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(${name} PRIVATE strand_common)
endforeach()

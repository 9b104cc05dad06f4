# libFuzzer harnesses of the engine beyond fuzz_definition and fuzz_expr (which
# services.cmake builds): stored snapshots. Included by tests/fuzz/CMakeLists.txt.
add_executable(fuzz_snapshot ${CMAKE_CURRENT_LIST_DIR}/fuzz_snapshot.c)
target_compile_options(fuzz_snapshot PRIVATE ${ST_FUZZ_FLAGS})
target_link_options(fuzz_snapshot PRIVATE ${ST_FUZZ_FLAGS})
target_link_libraries(fuzz_snapshot PRIVATE strand_engine)

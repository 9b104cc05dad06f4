# libFuzzer harnesses of definition diagrams (libs/diagram: DOT generation checked by
# Graphviz's reader) and task result schemas (libs/common). Included by
# tests/fuzz/CMakeLists.txt.
foreach(name fuzz_diagram fuzz_result_schema)
  add_executable(${name} ${CMAKE_CURRENT_LIST_DIR}/${name}.c)
  target_compile_options(${name} PRIVATE ${ST_FUZZ_FLAGS})
  target_link_options(${name} PRIVATE ${ST_FUZZ_FLAGS})
  target_link_libraries(${name} PRIVATE strand_diagram strand_common)
endforeach()

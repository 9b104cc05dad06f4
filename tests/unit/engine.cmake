# Engine unit tests not registered in tests/CMakeLists.txt itself (included from there
# when present; st_unit_test is defined before the include).
st_unit_test(test_process unit/test_process.c LIBS strand_engine)
st_unit_test(test_snapshot unit/test_snapshot.c LIBS strand_engine)
st_unit_test(test_engine_limits unit/test_engine_limits.c LIBS strand_engine)

# tests/runtime/data.mk: tests of token shards and training batches (included by Makefile.am)
check_PROGRAMS += tests/runtime/test_shard tests/runtime/test_data
TESTS += tests/runtime/test_shard tests/runtime/test_data
tests_runtime_test_shard_SOURCES = tests/runtime/test_shard.c
tests_runtime_test_data_SOURCES = tests/runtime/test_data.c

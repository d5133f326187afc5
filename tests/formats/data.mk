# tests/formats/data.mk: tests of token shards and training batches (included by Makefile.am)
check_PROGRAMS += tests/formats/test_shard tests/formats/test_data
TESTS += tests/formats/test_shard tests/formats/test_data
tests_formats_test_shard_SOURCES = tests/formats/test_shard.c tests/lib/sdp_test.h \
	tests/lib/sdp_test_files.h
tests_formats_test_data_SOURCES = tests/formats/test_data.c tests/lib/sdp_test.h

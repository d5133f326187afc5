# tests/formats/formats.mk: sources and tests of this folder (included by Makefile.am)
check_PROGRAMS += tests/formats/test_safetensors tests/formats/test_safetensors_bad \
	tests/formats/test_hfconfig
TESTS += tests/formats/test_safetensors tests/formats/test_safetensors_bad \
	tests/formats/test_hfconfig
tests_formats_test_safetensors_SOURCES = tests/formats/test_safetensors.c \
	tests/formats/safetensors_test.h tests/lib/sdp_test.h tests/lib/sdp_test_files.h
tests_formats_test_safetensors_bad_SOURCES = tests/formats/test_safetensors_bad.c \
	tests/formats/safetensors_test.h tests/lib/sdp_test.h tests/lib/sdp_test_files.h
tests_formats_test_hfconfig_SOURCES = tests/formats/test_hfconfig.c tests/lib/sdp_test.h \
	tests/lib/sdp_test_files.h
EXTRA_DIST += tests/formats/data/qwen3-0.6b.config.json tests/formats/data/llama-3.2-1b.config.json
check_PROGRAMS += tests/formats/test_machine
TESTS += tests/formats/test_machine
tests_formats_test_machine_SOURCES = tests/formats/test_machine.c tests/lib/sdp_test.h \
	tests/lib/sdp_test_files.h
# Qwen3-MoE configs (formats/hfconfig_moe.c, models/moe.c)
check_PROGRAMS += tests/formats/test_hfconfig_moe
TESTS += tests/formats/test_hfconfig_moe
tests_formats_test_hfconfig_moe_SOURCES = tests/formats/test_hfconfig_moe.c tests/lib/sdp_test.h \
	tests/lib/sdp_test_files.h

# tests/formats/formats.mk: sources and tests of this folder (included by Makefile.am)
check_PROGRAMS += tests/formats/test_safetensors tests/formats/test_hfconfig
TESTS += tests/formats/test_safetensors tests/formats/test_hfconfig
tests_formats_test_safetensors_SOURCES = tests/formats/test_safetensors.c
tests_formats_test_hfconfig_SOURCES = tests/formats/test_hfconfig.c
EXTRA_DIST += tests/formats/data/qwen3-0.6b.config.json tests/formats/data/llama-3.2-1b.config.json

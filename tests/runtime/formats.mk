# tests/runtime/formats.mk: sources and tests of this folder (included by Makefile.am)
check_PROGRAMS += tests/runtime/test_safetensors tests/runtime/test_hfconfig
TESTS += tests/runtime/test_safetensors tests/runtime/test_hfconfig
tests_runtime_test_safetensors_SOURCES = tests/runtime/test_safetensors.c
tests_runtime_test_hfconfig_SOURCES = tests/runtime/test_hfconfig.c
EXTRA_DIST += tests/runtime/data/qwen3-0.6b.config.json tests/runtime/data/llama-3.2-1b.config.json

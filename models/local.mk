# models/local.mk: sources and tests of this folder (included by Makefile.am)
libsdp_a_SOURCES += models/sdp_models.h models/qwen3.c

check_PROGRAMS += tests/runtime/test_model_layout
TESTS += tests/runtime/test_model_layout
tests_runtime_test_model_layout_SOURCES = tests/runtime/test_model_layout.c

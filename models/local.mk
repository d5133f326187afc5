# models/local.mk: sources and tests of this folder (included by Makefile.am)
libsdp_a_SOURCES += models/sdp_models.h models/qwen3.c models/sdp_lora.h models/lora.c \
	models/rope.c models/moe.c models/workspace.c

check_PROGRAMS += tests/models/test_model_layout
TESTS += tests/models/test_model_layout
tests_models_test_model_layout_SOURCES = tests/models/test_model_layout.c

check_PROGRAMS += tests/models/test_lora
TESTS += tests/models/test_lora
tests_models_test_lora_SOURCES = tests/models/test_lora.c

check_PROGRAMS += tests/models/test_workspace
TESTS += tests/models/test_workspace
tests_models_test_workspace_SOURCES = tests/models/test_workspace.c

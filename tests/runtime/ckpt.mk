# tests/runtime/ckpt.mk: tests of the checkpoints (included by Makefile.am)
check_PROGRAMS += tests/runtime/test_ckpt
TESTS += tests/runtime/test_ckpt
tests_runtime_test_ckpt_SOURCES = tests/runtime/test_ckpt.c tests/lib/sdp_test.h
# LoRA's state: the frozen base and the adapters (test_state_lora.c)
check_PROGRAMS += tests/runtime/test_state_lora
TESTS += tests/runtime/test_state_lora
tests_runtime_test_state_lora_SOURCES = tests/runtime/test_state_lora.c tests/lib/sdp_test.h

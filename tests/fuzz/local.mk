# tests/fuzz/local.mk: libFuzzer targets of the parsers (included by Makefile.am).
# `make fuzz` builds them with clang into build/fuzz/ and runs each FUZZ_SECONDS (tools/fuzz.sh).
# `make check` replays the seed corpora and every past crash input (tests/fuzz/regressions/) through
# the same targets built without libFuzzer, with a plain main() (replay_main.c).
FUZZ_SECONDS = 60
fuzz:
	bash $(top_srcdir)/tools/fuzz.sh $(FUZZ_SECONDS)
.PHONY: fuzz

FUZZ_COMMON = tests/fuzz/replay_main.c tests/fuzz/fuzz_common.h
check_PROGRAMS += tests/fuzz/test_fuzz_replay_safetensors tests/fuzz/test_fuzz_replay_hfconfig \
	tests/fuzz/test_fuzz_replay_recipe tests/fuzz/test_fuzz_replay_tokenizer \
	tests/fuzz/test_fuzz_replay_shard tests/fuzz/test_fuzz_replay_ckpt
tests_fuzz_test_fuzz_replay_safetensors_SOURCES = tests/fuzz/fuzz_safetensors.c $(FUZZ_COMMON)
tests_fuzz_test_fuzz_replay_hfconfig_SOURCES = tests/fuzz/fuzz_hfconfig.c $(FUZZ_COMMON)
tests_fuzz_test_fuzz_replay_recipe_SOURCES = tests/fuzz/fuzz_recipe.c $(FUZZ_COMMON)
tests_fuzz_test_fuzz_replay_tokenizer_SOURCES = tests/fuzz/fuzz_tokenizer.c $(FUZZ_COMMON)
tests_fuzz_test_fuzz_replay_shard_SOURCES = tests/fuzz/fuzz_shard.c $(FUZZ_COMMON)
tests_fuzz_test_fuzz_replay_ckpt_SOURCES = tests/fuzz/fuzz_ckpt.c $(FUZZ_COMMON)
TESTS += tests/fuzz/test_fuzz_regressions.sh
EXTRA_DIST += tests/fuzz/test_fuzz_regressions.sh tests/fuzz/fuzz_log.c tests/fuzz/corpus \
	tests/fuzz/regressions tests/sanitizers

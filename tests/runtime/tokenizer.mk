# tests/runtime/tokenizer.mk: tokenizer unit tests, and `slidedp tokenize` (plain, JSONL and chat
# input) against Python tokenizers (exit 77 without it) (included by Makefile.am)
check_PROGRAMS += tests/runtime/test_tokenizer
TESTS += tests/runtime/test_tokenizer tests/runtime/test_tokenize_hf.py \
	tests/runtime/test_tokenize_chat.py
tests_runtime_test_tokenizer_SOURCES = tests/runtime/test_tokenizer.c tests/lib/sdp_test.h
EXTRA_DIST += tests/runtime/test_tokenize_hf.py tests/runtime/test_tokenize_chat.py

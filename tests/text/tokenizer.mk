# tests/text/tokenizer.mk: tokenizer unit tests, and `slidedp tokenize` (plain, JSONL and chat
# input) against Python tokenizers (exit 77 without it) (included by Makefile.am)
check_PROGRAMS += tests/text/test_tokenizer
TESTS += tests/text/test_tokenizer tests/text/test_tokenize_hf.py \
	tests/text/test_tokenize_chat.py
tests_text_test_tokenizer_SOURCES = tests/text/test_tokenizer.c tests/lib/sdp_test.h \
	tests/lib/sdp_test_files.h
EXTRA_DIST += tests/text/test_tokenize_hf.py tests/text/test_tokenize_chat.py

# runtime/tokenizer.mk: byte-level BPE tokenizer, identical to Hugging Face tokenizers, and the
# Qwen3 chat template for instruction data (included by Makefile.am).  `slidedp tokenize` lives in
# runtime/cli/tokenize.c, listed with the CLI sources.
libsdp_a_SOURCES += runtime/tokenizer.h runtime/tokenizer_internal.h runtime/tokenizer.c \
	runtime/tokenizer_encode.c runtime/bpe.c runtime/chat.h runtime/chat.c

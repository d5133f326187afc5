# text/tokenizer.mk: byte-level BPE tokenizer, identical to Hugging Face tokenizers, and the
# Qwen3 chat template for instruction data (included by Makefile.am).  `slidedp tokenize` lives in
# cli/tokenize.c, listed with the CLI sources.
libsdp_a_SOURCES += text/tokenizer.h text/tokenizer_internal.h text/tokenizer.c \
	text/tokenizer_encode.c text/bpe.c text/chat.h text/chat.c

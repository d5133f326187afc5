# runtime/formats.mk: sources and tests of this folder (included by Makefile.am)
# Hugging Face file formats: safetensors (single or sharded; read, write) and config.json.
libsdp_a_SOURCES += runtime/safetensors.h runtime/safetensors.c runtime/safetensors_write.c
libsdp_a_SOURCES += runtime/hfconfig.h runtime/hfconfig.c

# formats/formats.mk: sources and tests of this folder (included by Makefile.am)
# Hugging Face file formats: safetensors (single or sharded; read, write) and config.json.
libsdp_a_SOURCES += formats/safetensors.h formats/safetensors.c formats/safetensors_write.c
libsdp_a_SOURCES += formats/hfconfig.h formats/hfconfig.c formats/hfconfig_moe.c formats/hfconfig_internal.h formats/peftconfig.h formats/peftconfig.c
# Checkpoint files (runtime/ckpt.h saves and restores the state through them).
libsdp_a_SOURCES += formats/ckpt_format.h formats/ckpt_header.c formats/ckpt_read.c
libsdp_a_SOURCES += formats/machine.h formats/machine.c

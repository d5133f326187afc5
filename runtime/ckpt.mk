# runtime/ckpt.mk: checkpoints of the training state (included by Makefile.am).
# runtime/cli/export.c (`slidedp export`) belongs to slidedp_SOURCES in runtime/cli/local.mk,
# which is included after this file.
libsdp_a_SOURCES += runtime/ckpt.h runtime/ckpt.c

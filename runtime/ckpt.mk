# runtime/ckpt.mk: checkpoints of the training state (included by Makefile.am).
# cli/export.c (`slidedp export`) belongs to slidedp_SOURCES in cli/local.mk,
# which is included after this file.
libsdp_a_SOURCES += runtime/ckpt.h runtime/ckpt_internal.h runtime/ckpt.c runtime/ckpt_save.c

# runtime/trace.mk: the task event log and Chrome trace (included by Makefile.am)
libsdp_a_SOURCES += runtime/trace.h runtime/trace.c

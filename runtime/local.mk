# runtime/local.mk: sources and tests of this folder (included by Makefile.am)
libsdp_a_SOURCES += runtime/sdp_log.h runtime/log.c runtime/hint.h runtime/hint.c
libsdp_a_SOURCES += runtime/tensor.h runtime/tensor_starpu.h runtime/tensor.c
libsdp_a_SOURCES += runtime/init.h runtime/init.c
libsdp_a_SOURCES += runtime/state.h runtime/state.c
libsdp_a_SOURCES += runtime/fsutil.h runtime/fsutil.c

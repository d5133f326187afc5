# codelets/cpu/local.mk: sources and tests of this folder (included by Makefile.am)
# Pure CPU kernels: scalar references and BLAS-backed GEMMs; no StarPU, no runtime headers.
libsdp_a_SOURCES += codelets/cpu/sdp_cpu_kernels.h \
	codelets/cpu/cast_bf16_ref.c \
	codelets/cpu/matmul.c \
	codelets/cpu/embedding_ref.c \
	codelets/cpu/rmsnorm_ref.c \
	codelets/cpu/qknorm_rope_ref.c \
	codelets/cpu/attention_ref.c \
	codelets/cpu/swiglu_ref.c \
	codelets/cpu/lmhead_ce.c \
	codelets/cpu/adamw_ref.c

# codelets/cpu/local.mk: sources and tests of this folder (included by Makefile.am)
# Pure CPU kernels: scalar references, AVX-512 host kernels and BLAS-backed GEMMs; no StarPU, no
# runtime headers.
libsdp_a_SOURCES += codelets/cpu/sdp_cpu_kernels.h \
	codelets/cpu/matmul.c codelets/cpu/lora.c \
	codelets/cpu/embedding_ref.c \
	codelets/cpu/rmsnorm_ref.c \
	codelets/cpu/qknorm_rope_ref.c \
	codelets/cpu/rope.h \
	codelets/cpu/rope_freq.c \
	codelets/cpu/attention_ref.c \
	codelets/cpu/attention_blas.c \
	codelets/cpu/swiglu_ref.c \
	codelets/cpu/moe.h codelets/cpu/moe_router.c codelets/cpu/moe_experts.c \
	codelets/cpu/lmhead_ce.c \
	codelets/cpu/cpu_pool.c

# The AdamW and cast kernels and the LM head's element-wise work, references and AVX-512 alike, are
# compiled with -ffp-contract=off so that no target (FMA in -march, or the AVX-512 functions' own
# target) fuses a*b+c: each operation rounds on its own and the AVX-512 kernels match the
# references bit for bit.  Per-target flags
# need a target of their own: these objects belong to a library that is never built as such
# (EXTRA_LIBRARIES) and go into libsdp.a.  AVX-512 is enabled per function (target attributes),
# never for a whole file, so the build runs on any x86-64.
EXTRA_LIBRARIES = libsdp_fpstrict.a
libsdp_fpstrict_a_SOURCES = codelets/cpu/cast_bf16_ref.c codelets/cpu/avx512_internal.h \
	codelets/cpu/cast_avx512.c \
	codelets/cpu/adamw_ref.c \
	codelets/cpu/adamw_avx512.c \
	codelets/cpu/sumsq_avx512.c \
	codelets/cpu/lmhead_rows.c
libsdp_fpstrict_a_CFLAGS = $(AM_CFLAGS) -ffp-contract=off
libsdp_a_LIBADD = $(libsdp_fpstrict_a_OBJECTS)
libsdp_a_DEPENDENCIES = $(libsdp_fpstrict_a_OBJECTS)

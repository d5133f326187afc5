# SPDX-License-Identifier: MIT
# tests/kernels/: the vectorized host kernels (AVX-512 AdamW and cast) against their scalar references
check_PROGRAMS += tests/kernels/test_kernels_host_simd
TESTS += tests/kernels/test_kernels_host_simd
tests_kernels_test_kernels_host_simd_SOURCES = tests/kernels/test_kernels_host_simd.c \
	tests/lib/sdp_test.h

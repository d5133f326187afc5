# SPDX-License-Identifier: MIT
# tests/kernels/: the vectorized host kernels (AVX-512 AdamW and cast) against their scalar references

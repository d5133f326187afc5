/* SPDX-License-Identifier: MIT */
/* CRC32C: the Castagnoli CRC (iSCSI, RFC 3720), reflected polynomial 0x82f63b78, initial value and
 * final xor 0xffffffff; its check value for "123456789" is 0xe3069283.  Checkpoints use it for
 * their header and every tensor (formats/ckpt_format.h).  Tests: tests/runtime/test_ckpt.c. */
#ifndef SDP_CRC32C_H
#define SDP_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/** Castagnoli CRC32 of n bytes, continuing from crc (0 to start): hardware (SSE4.2) when the CPU
 * has it, else sdp_crc32c_sw. */
uint32_t sdp_crc32c(uint32_t crc, const void *buf, size_t n);
/** Portable slicing-by-8 CRC32C (same results as sdp_crc32c). */
uint32_t sdp_crc32c_sw(uint32_t crc, const void *buf, size_t n);

#endif

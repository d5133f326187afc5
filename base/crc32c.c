/* SPDX-License-Identifier: MIT */
/* CRC32C (see crc32c.h): slicing-by-8 tables built once, the SSE4.2 instruction when present. */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define HAVE_CRC32C_HW 1
#endif

#include "base/crc32c.h"

static uint32_t crc_table[8][256];
static int crc_hw;
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    /* slicing-by-8: table[k][i] is the crc of byte i followed by k zero bytes */
    for (int k = 1; k < 8; k++)
        for (int i = 0; i < 256; i++)
            crc_table[k][i] = (crc_table[k - 1][i] >> 8) ^ crc_table[0][crc_table[k - 1][i] & 0xff];
#ifdef HAVE_CRC32C_HW
    __builtin_cpu_init();
    crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

uint32_t sdp_crc32c_sw(uint32_t crc, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    uint32_t c = ~crc;
    pthread_once(&crc_once, crc_init);
    for (; n && ((uintptr_t)p & 7); n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = crc_table[7][lo & 0xff] ^ crc_table[6][(lo >> 8) & 0xff] ^
            crc_table[5][(lo >> 16) & 0xff] ^ crc_table[4][lo >> 24] ^ crc_table[3][hi & 0xff] ^
            crc_table[2][(hi >> 8) & 0xff] ^ crc_table[1][(hi >> 16) & 0xff] ^
            crc_table[0][hi >> 24];
    }
    for (; n; n--)
        c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xff];
    return ~c;
}

#ifdef HAVE_CRC32C_HW
/* The SSE4.2 crc32 instruction computes the same polynomial, 8 bytes per instruction. */
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(uint32_t crc, const void *buf, size_t n)
{
    const unsigned char *p = buf;
    uint64_t c = ~crc;
    for (; n && ((uintptr_t)p & 7); n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
    }
    for (; n; n--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return ~(uint32_t)c;
}
#endif

uint32_t sdp_crc32c(uint32_t crc, const void *buf, size_t n)
{
    pthread_once(&crc_once, crc_init);
#ifdef HAVE_CRC32C_HW
    if (crc_hw)
        return crc32c_hw(crc, buf, n);
#endif
    return sdp_crc32c_sw(crc, buf, n);
}

/* SPDX-License-Identifier: MIT */
/* Large host buffers (base/hostmem.h). */
#include "config.h"

#include <sys/mman.h>

#include "base/hostmem.h"

/* Anonymous pages: zero by definition, so nothing is touched here; the first writer faults them
 * in (the initialisation and the first update run on every core, where one thread's memset of tens
 * of GiB took most of a large model's start-up).  Huge pages where the kernel allows them: fewer
 * faults and TLB misses for the update's streams. */
void *sdp_host_map(size_t nbytes)
{
    void *p = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, nbytes, MADV_HUGEPAGE); /* advice only: refused where THP is off */
#endif
    return p;
}

void sdp_host_unmap(void *p, size_t nbytes)
{
    if (p)
        munmap(p, nbytes);
}

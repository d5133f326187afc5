/* SPDX-License-Identifier: MIT */
/* Large host buffers as the training state has them: anonymous pages, huge where the kernel
 * allows, so that what streams over them (AdamW, the casts) and what measures that stream
 * (`slidedp calibrate`) see the same memory. */
#ifndef SDP_HOSTMEM_H
#define SDP_HOSTMEM_H

#include <stddef.h>

/** nbytes of zeroed anonymous memory (the first writer faults the pages in), with huge pages
 * advised.  @return the memory, or NULL */
void *sdp_host_map(size_t nbytes);
/** Give back what sdp_host_map returned (NULL: nothing). */
void sdp_host_unmap(void *p, size_t nbytes);

#endif

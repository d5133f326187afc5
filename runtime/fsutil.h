/* SPDX-License-Identifier: MIT */
/* File-system helpers shared by the writers of the runtime. */
#ifndef SDP_FSUTIL_H
#define SDP_FSUTIL_H

/** mkdir -p: create dir and its missing parents.  @return 0 or a negative errno (logged) */
int sdp_mkdir_p(const char *dir);

#endif

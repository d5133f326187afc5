/* SPDX-License-Identifier: MIT */
/* File-system helpers shared by the writers of the runtime. */
#ifndef SDP_FSUTIL_H
#define SDP_FSUTIL_H

#include <stddef.h>

/** mkdir -p: create dir and its missing parents.  @return 0 or a negative errno (logged) */
int sdp_mkdir_p(const char *dir);

/** Replace path with len bytes of data atomically: path.tmp, fsync, rename, fsync of the directory.
 * On failure path is untouched and the temporary removed.  @return 0 or a negative errno (logged)
 */
int sdp_write_file_atomic(const char *path, const void *data, size_t len);

#endif

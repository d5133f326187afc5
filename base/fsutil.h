/* SPDX-License-Identifier: MIT */
/* File-system helpers shared by every writer of the tree: the one place that fsyncs.  An atomic
 * write goes to path.tmp, then sdp_file_commit (flush, fsync, close, rename) and sdp_fsync_parent
 * (so that the rename itself is durable). */
#ifndef SDP_FSUTIL_H
#define SDP_FSUTIL_H

#include <stddef.h>
#include <stdio.h>

/** mkdir -p: create dir and its missing parents.  @return 0 or a negative errno (logged) */
int sdp_mkdir_p(const char *dir);

/** Replace path with len bytes of data atomically: path.tmp, fsync, rename, fsync of the directory.
 * On failure path is untouched and the temporary removed.  @return 0 or a negative errno (logged)
 */
int sdp_write_file_atomic(const char *path, const void *data, size_t len);

/** Finish a file written through fp as tmp and move it over path: fflush, fsync, fclose (fp is
 * closed in every case), rename.  On failure tmp is removed and *what (may be NULL) names the step
 * that failed: "flush failed", "fsync failed", "close failed" or "rename failed"; errno keeps the
 * failing call's code.  Nothing is logged: callers word the error.
 * @return 0 or a negative errno */
int sdp_file_commit(FILE *fp, const char *tmp, const char *path, const char **what);

/** fsync the directory dir, so that a rename or a new entry in it is durable.
 * @return 0 or a negative errno (not logged) */
int sdp_fsync_dir(const char *dir);

/** sdp_fsync_dir of the directory holding path ("." without a slash, "/" for "/name").
 * @return 0, -ENAMETOOLONG or the negative errno of open or fsync (not logged) */
int sdp_fsync_parent(const char *path);

/** What a path is to a command, for sdp_paths_check. */
enum sdp_path_kind {
    SDP_PATH_FILE,    /* a file read, or a file written (replaced through a temporary) */
    SDP_PATH_DIR,     /* a directory read as a whole, or one outputs are written into (those
                         outputs are listed on their own; it is only checked for being writable) */
    SDP_PATH_DIR_ALL, /* an output directory whose contents the command replaces or prunes */
};

/** A path a command reads or writes, and what it is to the user ("the metrics file"). */
struct sdp_path_role {
    const char *path; /* NULL or "" = not used */
    const char *what;
    enum sdp_path_kind kind;
};

/** Check, before anything is written, every output against every input and every other output,
 * as files (device and inode, through symlinks and hard links), not by name: an output may not be
 * an input, an existing output file may not lie in an input directory, and no input may lie in an
 * SDP_PATH_DIR_ALL output.  Each output must be writable: a file's directory exists and can be
 * written, a file is a regular file (not a directory, a device or a pipe: it is replaced through
 * a temporary), a directory is not a file (a missing one can be created).
 * Logs the first problem with both paths and a hint.
 * @return 0, -EEXIST (an output is or holds an input, or another output), -EISDIR, -ENOTDIR,
 * -EINVAL, -ENOENT (missing directory), -EACCES or -EROFS (not writable), -ENAMETOOLONG */
int sdp_paths_check(const struct sdp_path_role *out, int nout, const struct sdp_path_role *in,
                    int nin);

#endif

/* SPDX-License-Identifier: MIT */
/* File-system helpers (see fsutil.h). */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsutil.h"
#include "base/sdp_log.h"

int sdp_mkdir_p(const char *dir)
{
    char buf[4096];
    size_t len = strlen(dir);
    struct stat sb;
    if (len == 0 || len >= sizeof(buf))
        return sdp_err(-ENAMETOOLONG, "directory name '%s'", dir);
    memcpy(buf, dir, len + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0777) != 0 && errno != EEXIST)
            return sdp_err(-errno, "cannot create directory %s", buf);
        *p = '/';
    }
    if (mkdir(buf, 0777) != 0 && errno != EEXIST)
        return sdp_err(-errno, "cannot create directory %s", buf);
    if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return sdp_err(-ENOTDIR, "%s exists and is not a directory", buf);
    return 0;
}

/* A failed write or sync: a full disk (or quota) gets its own code and hint. */
static int write_failed(const char *tmp)
{
    int rc;
    if (errno != ENOSPC && errno != EDQUOT)
        return sdp_err(-errno, "cannot write %s", tmp);
    rc = sdp_err(-ENOSPC, "cannot write %s: no space left on the device", tmp);
    sdp_hint("free disk space or write to another directory; the previous file is untouched");
    return rc;
}

int sdp_write_file_atomic(const char *path, const void *data, size_t len)
{
    char tmp[4200];
    int fd, rc = 0;
    size_t done = 0;
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return sdp_err(-ENAMETOOLONG, "file name '%s'", path);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return sdp_err(-errno, "cannot create %s", tmp);
    while (done < len) {
        ssize_t n = write(fd, (const char *)data + done, len - done);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            rc = write_failed(tmp);
            break;
        }
        done += (size_t)n;
    }
    if (!rc && fsync(fd) != 0)
        rc = write_failed(tmp);
    if (close(fd) != 0 && !rc)
        rc = sdp_err(-errno, "cannot close %s", tmp);
    if (!rc && rename(tmp, path) != 0)
        rc = sdp_err(-errno, "cannot rename %s to %s", tmp, path);
    if (rc) {
        unlink(tmp);
        return rc;
    }
    sdp_fsync_parent(path); /* best effort: the new file is in place either way */
    return 0;
}

int sdp_file_commit(FILE *fp, const char *tmp, const char *path, const char **what)
{
    const char *step = NULL;
    int err = 0;
    if (fflush(fp) != 0)
        step = "flush failed", err = errno;
    else if (fsync(fileno(fp)) != 0)
        step = "fsync failed", err = errno;
    if (fclose(fp) != 0 && !step)
        step = "close failed", err = errno;
    if (!step && rename(tmp, path) != 0)
        step = "rename failed", err = errno;
    if (!step)
        return 0;
    unlink(tmp);
    if (what)
        *what = step;
    errno = err ? err : EIO;
    return -errno;
}

int sdp_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), rc = 0;
    if (fd < 0)
        return -errno;
    if (fsync(fd) != 0)
        rc = -errno;
    close(fd);
    return rc;
}

int sdp_fsync_parent(const char *path)
{
    char dir[4200];
    const char *slash = strrchr(path, '/');
    if (!slash)
        return sdp_fsync_dir(".");
    if (slash == path)
        return sdp_fsync_dir("/");
    if ((size_t)(slash - path) >= sizeof(dir))
        return -ENAMETOOLONG;
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
    return sdp_fsync_dir(dir);
}

/* ---- outputs against inputs ---- */

/* The canonical form of path, which may not exist: realpath of its longest existing prefix, then
 * the missing components.  Trailing slashes are dropped.  0, or -ENAMETOOLONG. */
static int canon(const char *path, char *out, size_t len)
{
    char buf[PATH_MAX], res[PATH_MAX];
    size_t n = strlen(path);
    char *slash;
    const char *base;
    while (n > 1 && path[n - 1] == '/')
        n--;
    if (n >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, n);
    buf[n] = '\0';
    if (realpath(buf, res))
        return snprintf(out, len, "%s", res) >= (int)len ? -ENAMETOOLONG : 0;
    slash = strrchr(buf, '/');
    base = slash ? slash + 1 : buf;
    if (slash == buf)
        return snprintf(out, len, "/%s", base) >= (int)len ? -ENAMETOOLONG : 0;
    if (slash)
        *slash = '\0';
    if (canon(slash ? buf : ".", res, sizeof(res)))
        return -ENAMETOOLONG;
    return snprintf(out, len, "%s/%s", strcmp(res, "/") ? res : "", base) >= (int)len
               ? -ENAMETOOLONG
               : 0;
}

/* a and b are one file: the same device and inode, or (for paths not there yet) one name. */
static int same_file(const char *a, const char *ca, const char *b, const char *cb)
{
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0)
        return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    return strcmp(ca, cb) == 0;
}

/* The canonical path ca lies strictly inside the directory cd. */
static int lies_in(const char *ca, const char *cd)
{
    size_t n = strlen(cd);
    if (!strcmp(cd, "/"))
        return ca[1] != '\0';
    return strncmp(ca, cd, n) == 0 && ca[n] == '/';
}

/* The directory of the canonical path c (c has at least one slash). */
static void parent_of(const char *c, char *out, size_t len)
{
    const char *slash = strrchr(c, '/');
    size_t n = slash == c ? 1 : (size_t)(slash - c);
    if (n >= len)
        n = len - 1;
    memmove(out, c, n);
    out[n] = '\0';
}

/* Can o be written: a file into an existing, writable directory (or one the command creates: new);
 * a directory that exists (or the nearest existing directory above it) writable. */
static int check_writable(const struct sdp_path_role *o, const char *c, int new)
{
    char dir[PATH_MAX];
    struct stat sb;
    int isdir = o->kind != SDP_PATH_FILE;
    if (stat(o->path, &sb) == 0 || (!isdir && o->path[strlen(o->path) - 1] == '/')) {
        if (!isdir && (o->path[strlen(o->path) - 1] == '/' || S_ISDIR(sb.st_mode))) {
            sdp_err(-EISDIR, "%s %s names a directory", o->what, o->path);
            sdp_hint("name a file inside it, or another file");
            return -EISDIR;
        }
        if (!isdir && !S_ISREG(sb.st_mode)) { /* a device or a pipe would be replaced */
            sdp_err(-EINVAL, "%s %s is not a regular file", o->what, o->path);
            sdp_hint("outputs are written to a temporary and renamed: name a regular file");
            return -EINVAL;
        }
        if (isdir && !S_ISDIR(sb.st_mode)) {
            sdp_err(-ENOTDIR, "%s %s exists and is not a directory", o->what, o->path);
            sdp_hint("name a directory, or a path that does not exist yet");
            return -ENOTDIR;
        }
    }
    parent_of(c, dir, sizeof(dir));
    if (isdir && stat(o->path, &sb) == 0)
        snprintf(dir, sizeof(dir), "%s", c);
    /* a missing directory is created with its parents: the nearest existing one must be writable */
    while ((isdir || new) && stat(dir, &sb) != 0 && errno == ENOENT && strcmp(dir, "/"))
        parent_of(dir, dir, sizeof(dir));
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
        int rc = stat(dir, &sb) != 0 ? -errno : -ENOTDIR;
        sdp_err(rc, "%s %s: directory %s", o->what, o->path, dir);
        sdp_hint("create the directory, or name a path in an existing one");
        return rc;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        int rc = -errno;
        sdp_err(rc, "%s %s: directory %s cannot be written", o->what, o->path, dir);
        sdp_hint("name a path in a directory you can write");
        return rc;
    }
    return 0;
}

/* Output o (canonical co) against p (canonical cp), an input (is_in) or another output: 0 or
 * -EEXIST. */
static int check_pair(const struct sdp_path_role *o, const char *co, const struct sdp_path_role *p,
                      const char *cp, int is_in)
{
    const char *how = NULL;
    struct stat sb;
    if (o->kind == SDP_PATH_DIR)
        return 0; /* written into, not over: what it will hold is listed on its own */
    if (same_file(o->path, co, p->path, cp))
        how = "is the same file as";
    else if (o->kind == SDP_PATH_DIR_ALL && lies_in(cp, co))
        how = "holds";
    else if (p->kind == SDP_PATH_DIR_ALL && lies_in(co, cp))
        how = "lies in";
    else if (is_in && o->kind == SDP_PATH_FILE && p->kind != SDP_PATH_FILE && lies_in(co, cp) &&
             stat(o->path, &sb) == 0)
        how = "would replace a file of"; /* an input directory is read as a whole */
    if (!how)
        return 0;
    sdp_err(-EEXIST, "%s %s %s %s %s", o->what, o->path, how, p->what, p->path);
    sdp_hint("write %s elsewhere: a command never writes over what it reads", o->what);
    return -EEXIST;
}

/* The directory of the canonical output co is itself an output directory (created if missing). */
static int in_new_dir(const struct sdp_path_role *out, int nout, const char *co)
{
    char dir[PATH_MAX], c[PATH_MAX];
    parent_of(co, dir, sizeof(dir));
    for (int k = 0; k < nout; k++)
        if (out[k].path && out[k].path[0] && out[k].kind != SDP_PATH_FILE &&
            !canon(out[k].path, c, sizeof(c)) && !strcmp(c, dir))
            return 1;
    return 0;
}

int sdp_paths_check(const struct sdp_path_role *out, int nout, const struct sdp_path_role *in,
                    int nin)
{
    char co[PATH_MAX], cp[PATH_MAX];
    int rc;
    for (int i = 0; i < nout; i++) {
        if (!out[i].path || !out[i].path[0])
            continue;
        if (canon(out[i].path, co, sizeof(co)))
            return sdp_err(-ENAMETOOLONG, "%s %s: name too long", out[i].what, out[i].path);
        if ((rc = check_writable(&out[i], co, in_new_dir(out, nout, co))) != 0)
            return rc;
        for (int j = 0; j < nin + nout; j++) {
            const struct sdp_path_role *p = j < nin ? &in[j] : &out[j - nin];
            if (p == &out[i] || !p->path || !p->path[0] || (j >= nin && j - nin < i))
                continue;
            if (canon(p->path, cp, sizeof(cp)))
                return sdp_err(-ENAMETOOLONG, "%s %s: name too long", p->what, p->path);
            if ((rc = check_pair(&out[i], co, p, cp, j < nin)) != 0)
                return rc;
        }
    }
    return 0;
}

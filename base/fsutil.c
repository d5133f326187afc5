/* SPDX-License-Identifier: MIT */
/* File-system helpers (see fsutil.h). */
#include "config.h"

#include <errno.h>
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

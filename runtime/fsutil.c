/* SPDX-License-Identifier: MIT */
/* File-system helpers (see fsutil.h). */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/fsutil.h"
#include "runtime/sdp_log.h"

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

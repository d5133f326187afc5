# base/local.mk: the floor every other folder may use and which uses none (log, file utilities, crc32c)
libsdp_a_SOURCES += base/sdp_log.h base/log.c base/fsutil.h base/fsutil.c base/env.h base/env.c
libsdp_a_SOURCES += base/crc32c.h base/crc32c.c base/hostmem.h base/hostmem.c base/splitmix.h

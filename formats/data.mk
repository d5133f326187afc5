# formats/data.mk: token shards and training batches (included by Makefile.am)
libsdp_a_SOURCES += formats/shard.h formats/shard.c formats/data.h formats/data.c

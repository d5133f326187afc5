# runtime/data.mk: token shards and training batches (included by Makefile.am)
libsdp_a_SOURCES += runtime/shard.h runtime/shard.c runtime/data.h runtime/data.c

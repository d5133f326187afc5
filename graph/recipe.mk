# graph/recipe.mk: YAML training recipes (included by Makefile.am)
libsdp_a_SOURCES += graph/recipe.h graph/recipe.c

# runtime/cli/: the slidedp program (built at the top of the build tree); included by Makefile.am
bin_PROGRAMS += slidedp
slidedp_SOURCES = runtime/cli/cli.h runtime/cli/main.c runtime/cli/train.c runtime/cli/policies.c runtime/cli/bench.c runtime/cli/export.c runtime/cli/tokenize.c runtime/cli/plot.c runtime/cli/sweep.c runtime/cli/util.c

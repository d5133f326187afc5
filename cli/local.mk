# cli/local.mk: the slidedp program (built at the top of the build tree) and the YAML recipe
# parser (in the library, for its tests and fuzzer); included by Makefile.am
libsdp_a_SOURCES += cli/recipe.h cli/recipe.c cli/recipe_check.c cli/recipe_plan.c cli/recipe_lora.c cli/options.h \
	cli/options.c
bin_PROGRAMS += slidedp
slidedp_SOURCES = cli/cli.h cli/main.c cli/train.c cli/train_internal.h cli/train_checks.c \
	cli/train_rundir.c cli/train_loop.c cli/train_nodes.c cli/train_eval.c cli/train_metrics.c cli/hfdir.h cli/hfdir.c \
	cli/policies.c cli/bench.c cli/bench_lora.c cli/export.c cli/tokenize.c cli/plot.c cli/sweep.c cli/util.c \
	cli/options_cli.c
slidedp_SOURCES += cli/calibrate.c cli/calibrate.h cli/calibrate_compute.c cli/calibrate_update.c cli/simulate.h cli/simulate.c cli/sim_platform.c cli/plan.c \
	cli/predict_cli.h cli/predict_cli.c cli/plan_auto.c cli/plan_split.c cli/autopolicy.c cli/autopolicy_cache.c cli/moe_routing.c \
	cli/autopolicy_check.c

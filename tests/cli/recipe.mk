# tests/cli/recipe.mk: tests of YAML training recipes (included by Makefile.am)
check_PROGRAMS += tests/cli/test_recipe
TESTS += tests/cli/test_recipe
tests_cli_test_recipe_SOURCES = tests/cli/test_recipe.c
# the options registry, the --help texts, docs/options.md and the recipe parser agree
TESTS += tests/cli/test_options.sh
EXTRA_DIST += tests/cli/test_options.sh docs/options.md

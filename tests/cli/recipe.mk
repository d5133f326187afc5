# tests/cli/recipe.mk: tests of YAML training recipes (included by Makefile.am)
check_PROGRAMS += tests/cli/test_recipe
TESTS += tests/cli/test_recipe
tests_cli_test_recipe_SOURCES = tests/cli/test_recipe.c

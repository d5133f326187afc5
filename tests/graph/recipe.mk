# tests/graph/recipe.mk: tests of YAML training recipes (included by Makefile.am)
check_PROGRAMS += tests/graph/test_recipe
TESTS += tests/graph/test_recipe
tests_graph_test_recipe_SOURCES = tests/graph/test_recipe.c
# the GPU memory a graph configuration needs at least (graph/step.c)
check_PROGRAMS += tests/graph/test_gpu_bytes
TESTS += tests/graph/test_gpu_bytes
tests_graph_test_gpu_bytes_SOURCES = tests/graph/test_gpu_bytes.c

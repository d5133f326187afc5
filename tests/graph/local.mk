# tests/graph/local.mk: tests of the step's graph (included by Makefile.am)
# the GPU memory a graph configuration needs at least (graph/step.c)
check_PROGRAMS += tests/graph/test_gpu_bytes
TESTS += tests/graph/test_gpu_bytes
tests_graph_test_gpu_bytes_SOURCES = tests/graph/test_gpu_bytes.c tests/lib/sdp_test.h
# the task graph of a step for given plans: counts per codelet and layer, ordering (graph/plan.h)
check_PROGRAMS += tests/graph/test_graph_tasks
TESTS += tests/graph/test_graph_tasks
tests_graph_test_graph_tasks_SOURCES = tests/graph/test_graph_tasks.c tests/lib/sdp_test.h
# the step-time model on hand-computed cases and the direction of each term (graph/predict.h)
check_PROGRAMS += tests/graph/test_predict
TESTS += tests/graph/test_predict
tests_graph_test_predict_SOURCES = tests/graph/test_predict.c tests/lib/sdp_test.h
# the placement chooser against brute force (graph/choose.h)
check_PROGRAMS += tests/graph/test_choose
TESTS += tests/graph/test_choose
tests_graph_test_choose_SOURCES = tests/graph/test_choose.c tests/lib/sdp_test.h
# RoundPipe's stage split: the dynamic program against brute force and greedy (graph/split.h)
check_PROGRAMS += tests/graph/test_split
TESTS += tests/graph/test_split
tests_graph_test_split_SOURCES = tests/graph/test_split.c tests/lib/sdp_test.h
# the step-time model's per-op costs for the stage split (graph/predict_ops.h)
check_PROGRAMS += tests/graph/test_predict_ops
TESTS += tests/graph/test_predict_ops
tests_graph_test_predict_ops_SOURCES = tests/graph/test_predict_ops.c tests/lib/sdp_test.h
# the step-time model's link between nodes on hand-computed cases (graph/predict_nodes.c)
check_PROGRAMS += tests/graph/test_predict_nodes
TESTS += tests/graph/test_predict_nodes
tests_graph_test_predict_nodes_SOURCES = tests/graph/test_predict_nodes.c tests/lib/sdp_test.h

# tests/e2e/: the task trace of a CPU run, its lanes, and the invariant checker on it and on a
# broken copy
TESTS += tests/e2e/test_e2e_trace.sh
EXTRA_DIST += tests/e2e/test_e2e_trace.sh

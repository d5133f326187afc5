# tests/e2e/: `slidedp plot`, and the `slidedp export` round trip through transformers
TESTS += tests/e2e/test_e2e_plot.sh tests/e2e/test_e2e_export_hf.sh
EXTRA_DIST += tests/e2e/test_e2e_plot.sh tests/e2e/test_e2e_export_hf.sh tests/e2e/export_hf.py
# helper of test_e2e_export_hf.sh (our logits of a batch), not a test itself
check_PROGRAMS += tests/e2e/dump_logits
tests_e2e_dump_logits_SOURCES = tests/e2e/dump_logits.c

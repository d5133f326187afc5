# SPDX-License-Identifier: MIT
# tests/e2e/: loss curves of our trainer against transformers from the same weights and data
TESTS += tests/e2e/test_e2e_loss_compare.sh
EXTRA_DIST += tests/e2e/test_e2e_loss_compare.sh bench/hf_loss_compare.py

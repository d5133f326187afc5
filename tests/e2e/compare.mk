# SPDX-License-Identifier: MIT
# tests/e2e/: loss curves of our trainer against transformers from the same weights and data; the
# PyTorch peers (bench/peers.py) on CPU processes
TESTS += tests/e2e/test_e2e_loss_compare.sh
EXTRA_DIST += tests/e2e/test_e2e_loss_compare.sh bench/hf_loss_compare.py
TESTS += tests/e2e/test_e2e_peers.sh
EXTRA_DIST += tests/e2e/test_e2e_peers.sh bench/peers.py

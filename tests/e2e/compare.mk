# SPDX-License-Identifier: MIT
# tests/e2e/: loss curves of our trainer against transformers from the same weights and data

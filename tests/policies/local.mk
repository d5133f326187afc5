# SPDX-License-Identifier: MIT
# tests/policies/: the project's scheduling policies (sdp-slidedp) and the invariant checker

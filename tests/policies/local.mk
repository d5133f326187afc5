# SPDX-License-Identifier: MIT
# tests/policies/: the project's scheduling policies (sdp-slidedp) and the invariant checker
check_PROGRAMS += tests/policies/test_policies_slidedp_key
TESTS += tests/policies/test_policies_slidedp_key tests/policies/test_policies_slidedp.sh
tests_policies_test_policies_slidedp_key_SOURCES = tests/policies/test_policies_slidedp_key.c \
	policies/slidedp_internal.h
EXTRA_DIST += tests/policies/test_policies_slidedp.sh
TESTS += tests/policies/test_policies_stale.sh
EXTRA_DIST += tests/policies/test_policies_stale.sh
check_PROGRAMS += tests/policies/test_policies_flight
TESTS += tests/policies/test_policies_flight
tests_policies_test_policies_flight_SOURCES = tests/policies/test_policies_flight.c \
	policies/roundpipe_flight.h policies/roundpipe_flight.c
check_PROGRAMS += tests/policies/test_policies_lpt
TESTS += tests/policies/test_policies_lpt
tests_policies_test_policies_lpt_SOURCES = tests/policies/test_policies_lpt.c \
	policies/roundpipe_lpt.h policies/slidedp_internal.h
TESTS += tests/policies/test_policies_routed_check.sh
EXTRA_DIST += tests/policies/test_policies_routed_check.sh

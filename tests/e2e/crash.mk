# tests/e2e/: SIGKILL at random moments (many during checkpoint writes), resume, compare bit for bit
TESTS += tests/e2e/test_e2e_crash.sh
EXTRA_DIST += tests/e2e/test_e2e_crash.sh

# tests/e2e/: whole runs through StarPU against Hugging Face references and end-to-end CLI checks
check_PROGRAMS += tests/e2e/test_e2e_hf_parity
TESTS += tests/e2e/test_e2e_hf_parity
tests_e2e_test_e2e_hf_parity_SOURCES = tests/e2e/test_e2e_hf_parity.c tests/lib/sdp_test.h
# the same test with the compute on the GPU (exit 77 without one)
check_PROGRAMS += tests/e2e/test_e2e_hf_parity_gpu
TESTS += tests/e2e/test_e2e_hf_parity_gpu
tests_e2e_test_e2e_hf_parity_gpu_SOURCES = tests/e2e/test_e2e_hf_parity.c tests/lib/sdp_test.h
tests_e2e_test_e2e_hf_parity_gpu_CPPFLAGS = $(AM_CPPFLAGS) -DSDP_TEST_GPU
EXTRA_DIST += tests/lib/e2e.sh tests/lib/run-test.sh
TESTS += tests/ref/check_refs.py tests/e2e/test_e2e_train_tiny.sh tests/e2e/test_e2e_policies.sh \
	tests/e2e/test_e2e_resume.sh tests/e2e/test_e2e_nan.sh \
	tests/e2e/test_e2e_bad_input.sh
EXTRA_DIST += tests/ref tests/e2e/test_e2e_train_tiny.sh tests/e2e/test_e2e_policies.sh tests/e2e/test_e2e_resume.sh tests/e2e/test_e2e_nan.sh \
	tests/e2e/test_e2e_bad_input.sh tests/e2e/data
# outputs against inputs (train, tokenize, export)
TESTS += tests/e2e/test_e2e_paths.sh
EXTRA_DIST += tests/e2e/test_e2e_paths.sh

#!/bin/sh
# Test wrapper for `make check`: a time limit and a private StarPU home per test, so calibration files of
# one test never leak into another or into the user's ~/.starpu.  Exit codes pass through (77 = skip).
limit=${SDP_TEST_TIMEOUT:-900}
STARPU_HOME=$(mktemp -d "${TMPDIR:-/tmp}/sdp-test-starpu.XXXXXX")
export STARPU_HOME
export STARPU_SILENT=1
export OPENBLAS_NUM_THREADS=1
case "$1" in
*.py) set -- "${PYTHON3:-python3}" "$@" ;;
esac
timeout --kill-after=10 "$limit" "$@"
rc=$?
rm -rf "$STARPU_HOME"
[ $rc -eq 124 ] && echo "test timed out after ${limit}s (SDP_TEST_TIMEOUT)" >&2
exit $rc

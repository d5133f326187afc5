#!/bin/sh
# Fails when a tracked C/CUDA source differs from what clang-format (.clang-format) would write.
# Fix with: clang-format -i $(git ls-files '*.c' '*.h' '*.cu')
set -e
cd "$(dirname "$0")/.."
files=$(git ls-files '*.c' '*.h' '*.cu')
clang-format --dry-run --Werror $files
echo "check-format: $(echo "$files" | wc -w) files formatted"

#!/usr/bin/env bash
# Checks that every tracked C/CUDA source and header is formatted by clang-format with the
# repository's .clang-format (prints the files that are not; exit 1 if any). Fix with
#   git ls-files '*.c' '*.h' '*.cc' '*.cpp' '*.hpp' '*.cu' | xargs clang-format -i
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
command -v clang-format >/dev/null || { echo "format: clang-format not installed"; exit 1; }
bad=()
while IFS= read -r f; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files '*.c' '*.h' '*.cc' '*.cpp' '*.hpp' '*.cu')
if [ ${#bad[@]} -gt 0 ]; then
    echo "format: ${#bad[@]} file(s) differ from clang-format ($(clang-format --version | head -n1)):"
    printf '  %s\n' "${bad[@]}"
    exit 1
fi
echo "format: $(git ls-files '*.c' '*.h' '*.cc' '*.cpp' '*.hpp' '*.cu' | wc -l) files clang-formatted"

#!/usr/bin/env bash
# check-format.sh: fails when a C file under src/, tools/, tests/ or include/ differs from
# what clang-format makes of it with the repository's .clang-format (clang-format 14, the
# version Debian 12 ships; STYLE.md §3.11). Generated tables (src/tokenizer/unicode_tables.c)
# are left out. Prints clang-format's diagnostics and the files that drift; exits 1 if any.
#   scripts/check-format.sh             check every file
#   scripts/check-format.sh FILE...     check only these (e.g. the files a change touches)
#   CLANG_FORMAT=clang-format-14 ...    pick the binary
# To fix a file: clang-format -i FILE.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 2
CF=${CLANG_FORMAT:-}
if [ -z "$CF" ]; then
    for c in clang-format-14 clang-format; do
        if command -v "$c" >/dev/null; then CF=$c; break; fi
    done
fi
if [ -z "$CF" ]; then
    echo "check-format: clang-format not found (scripts/deps.sh installs it)" >&2
    exit 2
fi
if [ $# -gt 0 ]; then
    files=("$@")
else
    mapfile -t files < <(find src tools tests include -name '*.[ch]' \
        ! -path 'src/tokenizer/unicode_tables.c' | sort)
fi
# one clang-format process for all files (per-file processes take minutes on a busy machine);
# its diagnostics start with "FILE:LINE:COL: error:"
out=$("$CF" --dry-run -Werror --style=file "${files[@]}" 2>&1)
rc=$?
drifting=$(printf '%s\n' "$out" | sed -n 's/^\([^:]*\):[0-9]*:[0-9]*: error:.*/\1/p' | sort -u)
if [ "$rc" -ne 0 ] || [ -n "$drifting" ]; then
    if [ -z "$drifting" ]; then printf '%s\n' "$out" >&2; exit 2; fi
    printf 'format drift: %s\n' $drifting
    echo "check-format: $(printf '%s\n' "$drifting" | wc -l) of ${#files[@]} files differ from clang-format ($CF); see clang-format --dry-run FILE"
    exit 1
fi
echo "check-format: ${#files[@]} files formatted"

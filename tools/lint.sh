#!/usr/bin/env bash
# make lint: clang-format, cppcheck and clang-tidy, failing only on what is NEW.
#
#   tools/lint.sh            check (exit 1 on a new finding or a listed file that is not formatted)
#   tools/lint.sh --update   rewrite tools/lint-baseline.txt with today's findings
#
# clang-format: every file named in tools/format-clean.txt must be clang-format clean (a line
#   "all" there means every C / CUDA source of src/ and tests/); files not listed are not checked
#   until the tree is formatted once.
# cppcheck (--enable=warning) and clang-tidy (.clang-tidy's list, over build/lint's
#   compile_commands.json written by tools/compile_commands.py): each finding is one line
#   "tool file check message" without line numbers (so an edit above it does not make it new);
#   a finding counts as new when it occurs more often than in tools/lint-baseline.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}
OUT=build/lint
BASE=tools/lint-baseline.txt
mkdir -p "$OUT"
fail=0

# ---- clang-format -------------------------------------------------------------------------
mapfile -t listed < <(grep -v '^\s*\(#\|$\)' tools/format-clean.txt || true)
if [ "${listed[0]:-}" = all ]; then
    mapfile -t listed < <(git ls-files 'src/*.c' 'src/*.h' 'src/*.cu' 'src/*.cuh' 'tests/c/*.c' 'tests/c/*.h' \
                                      'tests/cuda/*.c')
fi
unformatted=0
for f in "${listed[@]}"; do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "lint: $f is listed in tools/format-clean.txt but not clang-format clean (clang-format -i $f)"
        unformatted=$((unformatted + 1))
    fi
done
[ "$unformatted" -eq 0 ] || fail=1
echo "lint: clang-format: ${#listed[@]} listed files checked, $unformatted not clean"

# ---- cppcheck -------------------------------------------------------------------------------
cppcheck --quiet --enable=warning --std=c11 -D_GNU_SOURCE -Isrc -j "$JOBS" --inline-suppr \
    --template='cppcheck {file} {id} {message}' src 2>"$OUT/cppcheck.raw" || true
# ---- clang-tidy -----------------------------------------------------------------------------
python3 tools/compile_commands.py "$OUT/compile_commands.json" >/dev/null
python3 -c 'import json,sys; [print(e["file"]) for e in json.load(open(sys.argv[1]))]' "$OUT/compile_commands.json" |
    xargs -P "$JOBS" -n 4 clang-tidy -p "$OUT" --quiet 2>/dev/null >"$OUT/tidy.raw" || true
# "path:line:col: warning: message [check]" -> "clang-tidy path check message"
root="$(pwd)/"
sed -n 's#^'"$root"'##; s#^\([^: ]*\):[0-9]*:[0-9]*: \(warning\|error\): \(.*\) \[\([^]]*\)\]$#clang-tidy \1 \4 \3#p' \
    "$OUT/tidy.raw" >"$OUT/tidy.txt"
sort "$OUT/cppcheck.raw" "$OUT/tidy.txt" | grep -v '^\s*$' >"$OUT/findings.txt" || true

if [ "${1:-}" = --update ]; then
    {
        echo "# Findings of make lint accepted as of $(date -u +%Y-%m-%d) (tools/lint.sh --update rewrites this file)."
        echo "# One line per finding: tool, file, check, message (no line numbers). Fix them and delete the lines."
        cat "$OUT/findings.txt"
    } >"$BASE"
    echo "lint: $BASE: $(grep -vc '^#' "$BASE") findings recorded"
    exit 0
fi

# new = findings beyond the baseline's count of the same line (a multiset difference)
new=$(python3 - "$BASE" "$OUT/findings.txt" <<'PY'
import collections, sys
base = collections.Counter(l.rstrip("\n") for l in open(sys.argv[1]) if l.strip() and not l.startswith("#"))
now = collections.Counter(l.rstrip("\n") for l in open(sys.argv[2]) if l.strip())
for line, n in sorted(now.items()):
    for _ in range(n - base.get(line, 0)):
        print(line)
gone = sum((base - now).values())
if gone:
    print(f"lint: note: {gone} baseline finding(s) are gone: tools/lint.sh --update records that", file=sys.stderr)
PY
)
total=$(wc -l <"$OUT/findings.txt")
if [ -n "$new" ]; then
    echo "$new" | sed 's/^/lint: NEW: /'
    echo "lint: $(echo "$new" | wc -l) new finding(s) (of $total); fix them (or, agreed in review, tools/lint.sh --update)"
    fail=1
else
    echo "lint: cppcheck + clang-tidy: $total findings, none new"
fi
exit $fail

#!/usr/bin/env bash
# The project against the newest releases, not the pinned set (not part of .ci/run).
#
# Makes a temporary venv, installs the project with the newest release of every dependency
# (no constraints.txt; only torch stays at its pin, since a newer torch is a multi-GB CUDA
# download), prints the packages whose versions differ from constraints.txt, runs the tests
# and the coverage sweep, and prints what changed against the pinned run (docs/coverage.json).
#
#   bench/newest_releases.sh                                   # tests/test_coverage.py; sweep on added/changed types
#   bench/newest_releases.sh --tests "tests/test_coverage.py tests/test_capture.py" -k "not slow"
#   bench/newest_releases.sh --types "falcon llama convbert"  # the sweep on these types
#   bench/newest_releases.sh --shards "0/20 7/20"             # the sweep on these shards of all types
#   bench/newest_releases.sh --tests "" --types ""            # only install and compare versions
#
# --keep DIR keeps the venv in DIR (default: a temporary folder, removed at the end); a later
# run with the same --keep reuses it instead of installing again.
# Everything it prints is also written to $OUT (default $TMPDIR/newest-releases.log, outside
# the repository). How to move the pins forward: docs/development.md, "Moving the pins".
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TESTS="tests/test_coverage.py"
KEXPR=""
TYPES="auto"
SHARDS=""
KEEP=""
OUT="${OUT:-${TMPDIR:-/tmp}/newest-releases.log}"
while [ $# -gt 0 ]; do
  case "$1" in
    --tests) TESTS="$2"; shift 2 ;;
    -k) KEXPR="$2"; shift 2 ;;
    --types) TYPES="$2"; shift 2 ;;
    --shards) SHARDS="$2"; TYPES=""; shift 2 ;;
    --keep) KEEP="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "newest_releases.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

exec > >(tee "$OUT") 2>&1
WORK="$(mktemp -d)"
VENV="${KEEP:-$WORK/venv}"
cleanup() { [ -z "$KEEP" ] && rm -rf "$WORK"; }
trap cleanup EXIT

echo "== newest releases, $(date -u +%FT%TZ), project at $(git -C "$ROOT" rev-parse --short HEAD)"
grep -iE '^torch==' "$ROOT/constraints.txt" > "$WORK/torch-only.txt"
if [ -n "$KEEP" ] && [ -f "$VENV/bin/activate" ]; then
  echo "== reusing the venv in $VENV (installed by an earlier run)"
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
else
  python3 -m venv "$VENV" || exit 1
  # shellcheck disable=SC1091
  . "$VENV/bin/activate"
  echo "== install (newest releases; only $(cat "$WORK/torch-only.txt") pinned)"
  pip install -q -c "$WORK/torch-only.txt" -e "$ROOT[test,ray,compare]" || { echo "install failed"; exit 1; }
fi
cd "$ROOT" || exit 1

echo "== versions"
python bench/release_diff.py versions constraints.txt

if [ "$TYPES" = "auto" ]; then  # the types the newest transformers added or changed
  PINNED="$(grep -iE '^transformers==' constraints.txt | cut -d= -f3)"
  pip download -q --no-deps "transformers==$PINNED" -d "$WORK/wheel" >/dev/null 2>&1 \
    && python -m zipfile -e "$WORK"/wheel/transformers-*.whl "$WORK/old" \
    && TYPES="$(python bench/release_diff.py changed-types "$WORK/old/transformers/models" | tr '\n' ' ')" \
    || { echo "could not unpack transformers $PINNED to compare: give --types"; TYPES=""; }
fi

if [ -n "$TESTS" ]; then
  echo "== tests: $TESTS ${KEXPR:+-k $KEXPR}"
  # shellcheck disable=SC2086
  python -m pytest -q -p no:cacheprovider $TESTS ${KEXPR:+-k "$KEXPR"} 2>&1 | tail -n 40
  echo "tests exit status: ${PIPESTATUS[0]}"
fi

ROWS="$WORK/rows.jsonl"
: > "$ROWS"
if [ -n "$TYPES" ]; then
  echo "== coverage sweep on $(wc -w <<< "$TYPES") types: $TYPES"
  # shellcheck disable=SC2086
  python bench/coverage_sweep.py $TYPES --jsonl "$ROWS" > "$WORK/sweep.out" 2>&1
fi
for shard in $SHARDS; do
  echo "== coverage sweep, shard $shard"
  python bench/coverage_sweep.py --shard "$shard" --jsonl "$ROWS" >> "$WORK/sweep.out" 2>&1
done
if [ -s "$ROWS" ]; then
  python bench/release_diff.py rows docs/coverage.json "$ROWS"
  [ -n "$KEEP" ] && cp "$ROWS" "$KEEP/rows.jsonl"
fi
echo "== done (log: $OUT)"

#!/usr/bin/env bash
# The whole `probe report` command on EWT dev, two checkouts alternating on one machine, so a
# drifting machine (load, clock) moves both sides alike: the pairs compare, not runs across pairs.
#
#   bash bench/report_side_by_side.sh /path/to/before /path/to/after [RUNS]
#
# Each checkout needs its own .venv (python3 -m venv .venv && .venv/bin/pip install -c
# constraints.txt -e .) and ../shared/data beside it. Prints, per run, each side's wall
# seconds and peak RSS (GNU time) and the ratio after/before; the reports go to a temporary
# directory.
set -euo pipefail
before=${1:?"give the checkout to time first (before)"}
after=${2:?"give the checkout to compare with it (after)"}
runs=${3:-2}
conllu=../shared/data/ud-english-ewt/en_ewt-ud-dev.conllu
out=$(mktemp -d)
for i in $(seq 1 "$runs"); do
  for side in before after; do
    dir=${!side}
    (cd "$dir" && test -f "$conllu") || { echo "Error: $dir has no $conllu beside it" >&2; exit 2; }
    (cd "$dir" && /usr/bin/time -f "%e %M" -o "$out/$side$i.time" .venv/bin/probe report \
      --conllu "$conllu" --out "$out/$side$i" > "$out/$side$i.log" 2>&1)
  done
  read -r tb mb < "$out/before$i.time"
  read -r ta ma < "$out/after$i.time"
  python3 -c "print(f'run $i: before {float($tb):.1f} s ({$mb/2**20:.2f} GiB), after {float($ta):.1f} s ({$ma/2**20:.2f} GiB), ratio {float($ta)/float($tb):.2f}')"
done
echo "reports in $out"

#!/usr/bin/env bash
# `make test`: run the given make targets in order, stop at the first that
# fails, and print how long each took (also after a failure), so a slow or
# broken stage shows at the end of CI's log.
#   scripts/stages.sh setup venv lint unit molecule
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
declare -a names=() secs=() states=()
report() {
  local i total=0
  echo "== stage times"
  for i in "${!names[@]}"; do
    printf '%-10s %6ds  %s\n' "${names[$i]}" "${secs[$i]}" "${states[$i]}"
    total=$((total + secs[i]))
  done
  printf '%-10s %6ds\n' total "$total"
}
trap report EXIT
for stage in "$@"; do
  start=$SECONDS
  make --no-print-directory "$stage"
  rc=$?
  names+=("$stage")
  secs+=($((SECONDS - start)))
  if [[ $rc -ne 0 ]]; then
    states+=("failed ($rc)")
    exit "$rc"
  fi
  states+=(ok)
done

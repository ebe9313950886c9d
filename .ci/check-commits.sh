#!/usr/bin/env bash
# Commit subjects say what changed in at most 72 characters (CONTRIBUTING.md, "Commits"), so that
# `git log --oneline` reads in 72 columns. Checked for every commit after SINCE, the last commit before
# the rule was kept (older subjects stay as they were written).
set -euo pipefail
cd "$(dirname "$0")/.."
SINCE=117e3c7f9f4f7113cfd965e65a90412c8df4ad81
if git cat-file -e "$SINCE^{commit}" 2>/dev/null; then
    range="$SINCE..HEAD"
elif [ "$(git rev-parse --is-shallow-repository)" = true ]; then
    range=HEAD  # a shallow clone (actions/checkout's depth 1): the commits it has, all after SINCE
else
    echo "[check-commits] $SINCE is not in this history: is this imgbuild's repository?" >&2
    exit 1
fi
long=$(git log --format='%h %s' "$range" | awk '{ s = substr($0, index($0, " ") + 1); if (length(s) > 72) print length(s) ": " $0 }')
if [ -n "$long" ]; then
    echo "[check-commits] commit subjects over 72 characters (say the why in the body):" >&2
    echo "$long" >&2
    exit 1
fi
echo "[check-commits] $(git rev-list --count "$range") commits ($range): every subject at most 72 characters"

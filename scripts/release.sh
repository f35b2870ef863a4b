#!/usr/bin/env bash
# Builds the kubectl-karpenter release archives and the krew manifest that points at them.
#
#   scripts/release.sh [--host-only] [--binary PATH] VERSION [OUTDIR]
#
# VERSION is the workspace version, with or without the leading v (0.1.0 or v0.1.0); the manifest
# carries it as vX.Y.Z, as krew requires. For each of linux/amd64, linux/arm64, darwin/amd64 and
# darwin/arm64 it writes OUTDIR/kubectl-karpenter_<version>_<os>_<arch>.tar.gz holding
# `kubectl-karpenter` and `LICENSE`, then OUTDIR/karpenter.yaml from krew/karpenter.yaml.tmpl with
# each archive's URI and sha256. OUTDIR defaults to dist/release. A full release (all four
# platforms) into the default OUTDIR also copies the manifest to krew/karpenter.yaml, the one to
# submit to krew-index; --host-only never does (its digest would be of a local build only).
#
# Binaries: the host platform's is built with `cargo build --release` (features from
# CARGO_FEATURES, default `aws`, with KUBECTL_KARPENTER_GIT_COMMIT set to the checked-out commit,
# suffixed -dirty when the work tree has changes, and the build paths remapped out of the binary),
# or taken from --binary PATH; the build lands in ${CARGO_TARGET_DIR:-target}. Other platforms cannot be cross-compiled here: their binaries are
# taken from $DIST_DIR/<os>-<arch>/kubectl-karpenter (DIST_DIR defaults to dist), and a missing
# one is an error. --host-only packages the host platform alone and writes a manifest with only
# its entry (a complete, valid manifest for that platform; what the tests use).
#
# Archive URIs are RELEASE_URL_BASE/<archive>; RELEASE_URL_BASE defaults to the GitHub release
# download URL of the tag, https://github.com/karpenter-rs/karpenter-rs/releases/download/vX.Y.Z.
#
# Needs: bash, GNU tar (`tar` or `gtar`: the archives are made reproducible with its --sort,
# --owner and --mtime), gzip, sha256sum or `shasum -a 256`, and, unless --binary is given, cargo.
set -euo pipefail

usage() {
  sed -n '3,4p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
die() {
  echo "release.sh: error: $*" >&2
  exit 1
}

host_only=false
binary=""
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --host-only) host_only=true ;;
    --binary)
      [ $# -ge 2 ] || die "--binary needs a path"
      binary="$2"
      shift
      ;;
    --binary=*) binary="${1#--binary=}" ;;
    -h | --help) usage ;;
    -*) die "unknown flag $1 (see --help)" ;;
    *) args+=("$1") ;;
  esac
  shift
done
[ ${#args[@]} -ge 1 ] && [ ${#args[@]} -le 2 ] || usage

root="$(cd "$(dirname "$0")/.." && pwd)"
command -v gzip >/dev/null 2>&1 || die "gzip is not installed (needed to build the archives)"
# GNU tar, under either name (macOS ships bsdtar as tar; Homebrew's gnu-tar installs gtar).
gnu_tar=""
for candidate in tar gtar; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" --version 2>/dev/null | grep -q 'GNU tar'; then
    gnu_tar="$candidate"
    break
  fi
done
[ -n "$gnu_tar" ] || die "needs GNU tar (as tar or gtar) for reproducible archives; \
$(command -v tar >/dev/null 2>&1 && echo "the tar found is not GNU tar" || echo "no tar found"); \
on macOS: brew install gnu-tar"
if command -v sha256sum >/dev/null 2>&1; then
  sha256() { sha256sum "$1" | cut -d' ' -f1; }
elif command -v shasum >/dev/null 2>&1; then
  sha256() { shasum -a 256 "$1" | cut -d' ' -f1; }
else
  die "needs sha256sum (coreutils) or shasum (perl) to compute the archives' digests"
fi

# The version: vX.Y.Z in the manifest, X.Y.Z in file names; it must be the workspace's, since the
# binary reports that one.
version="${args[0]#v}"
[[ "$version" =~ ^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$ ]] ||
  die "VERSION \"${args[0]}\" is not a semantic version like 0.1.0 or v0.1.0"
tag="v$version"
workspace_version="$(awk '
  /^\[workspace\.package\]/ { section = 1; next }
  /^\[/ { section = 0 }
  section && $1 == "version" { gsub(/"/, "", $3); print $3; exit }
' "$root/Cargo.toml")"
[ "$version" = "$workspace_version" ] ||
  die "VERSION $version is not the workspace version $workspace_version (Cargo.toml); bump it first"

default_out=false
if [ ${#args[@]} -ge 2 ]; then
  out="${args[1]}"
else
  out="$root/dist/release"
  default_out=true
fi
mkdir -p "$out"
out="$(cd "$out" && pwd)"
url_base="${RELEASE_URL_BASE:-https://github.com/karpenter-rs/karpenter-rs/releases/download/$tag}"
url_base="${url_base%/}"
dist="${DIST_DIR:-$root/dist}"

# The host as krew names platforms (Go's GOOS/GOARCH).
case "$(uname -s)" in
  Linux) host_os=linux ;;
  Darwin) host_os=darwin ;;
  *) die "unsupported host OS $(uname -s): build on Linux or macOS" ;;
esac
case "$(uname -m)" in
  x86_64 | amd64) host_arch=amd64 ;;
  aarch64 | arm64) host_arch=arm64 ;;
  *) die "unsupported host architecture $(uname -m)" ;;
esac

if $host_only; then
  platforms=("$host_os/$host_arch")
else
  platforms=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
fi

# The host binary.
if [ -n "$binary" ]; then
  [ -f "$binary" ] && [ -x "$binary" ] || die "--binary $binary is not an executable file"
  host_binary="$binary"
else
  command -v cargo >/dev/null 2>&1 || die "cargo is not installed; pass --binary PATH instead"
  commit="$(git -C "$root" rev-parse HEAD 2>/dev/null || true)"
  if [ -n "$commit" ] && [ -n "$(git -C "$root" status --porcelain 2>/dev/null)" ]; then
    commit="$commit-dirty"
  fi
  features="${CARGO_FEATURES-aws}"
  target_dir="${CARGO_TARGET_DIR:-$root/target}"
  case "$target_dir" in
    /*) ;;
    *) target_dir="$root/$target_dir" ;; # cargo reads a relative one from where it runs: $root
  esac
  # Keep the build machine's paths out of the binary (panic messages, debug info). Passed as
  # CARGO_ENCODED_RUSTFLAGS (0x1f-separated) so paths with spaces survive; RUSTFLAGS or
  # CARGO_ENCODED_RUSTFLAGS given by the caller are kept.
  sep=$'\x1f'
  flags="${CARGO_ENCODED_RUSTFLAGS:-}"
  if [ -z "$flags" ] && [ -n "${RUSTFLAGS:-}" ]; then
    read -r -a words <<<"$RUSTFLAGS"
    flags="$(IFS="$sep"; echo "${words[*]}")"
  fi
  flags="${flags:+$flags$sep}--remap-path-prefix=$root=/build/karpenter-rs"
  flags+="$sep--remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
  echo "building kubectl-karpenter $tag for $host_os/$host_arch (features: ${features:-none})" >&2
  (cd "$root" && env -u RUSTFLAGS CARGO_ENCODED_RUSTFLAGS="$flags" \
    KUBECTL_KARPENTER_GIT_COMMIT="$commit" CARGO_TARGET_DIR="$target_dir" \
    cargo build --release --locked -p kubectl-karpenter ${features:+--features "$features"})
  host_binary="$target_dir/release/kubectl-karpenter"
fi

# Every binary first, so a missing one fails before anything is written.
binaries=()
for platform in "${platforms[@]}"; do
  if [ "$platform" = "$host_os/$host_arch" ]; then
    binaries+=("$host_binary")
  else
    candidate="$dist/${platform%/*}-${platform#*/}/kubectl-karpenter"
    [ -f "$candidate" ] || die "no binary for $platform: build it on that platform (or with a \
cross toolchain) and put it at $candidate, or pass --host-only to package $host_os/$host_arch alone"
    binaries+=("$candidate")
  fi
done

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
entries=""
for i in "${!platforms[@]}"; do
  platform="${platforms[$i]}"
  os="${platform%/*}" arch="${platform#*/}"
  archive="kubectl-karpenter_${version}_${os}_${arch}.tar.gz"
  rm -rf "$stage/$os-$arch"
  mkdir -p "$stage/$os-$arch"
  cp "${binaries[$i]}" "$stage/$os-$arch/kubectl-karpenter"
  chmod 0755 "$stage/$os-$arch/kubectl-karpenter"
  cp "$root/LICENSE" "$stage/$os-$arch/LICENSE"
  chmod 0644 "$stage/$os-$arch/LICENSE"
  # Fixed owner, order and times: the archive depends only on its two files.
  "$gnu_tar" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    -C "$stage/$os-$arch" -cf - kubectl-karpenter LICENSE | gzip -n >"$out/$archive"
  sha="$(sha256 "$out/$archive")"
  echo "$out/$archive  $sha" >&2
  entries+="  - selector:
      matchLabels:
        os: $os
        arch: $arch
    uri: $url_base/$archive
    sha256: $sha
    bin: kubectl-karpenter
"
done

template="$(cat "$root/krew/karpenter.yaml.tmpl")"
# The template's own comment is for the template; the manifest says where it came from.
template="$(printf '%s\n' "$template" | sed '/^#/d')"
manifest="# Generated by scripts/release.sh for $tag ($(IFS=' '; echo "${platforms[*]}")); do not edit.
${template//'${VERSION}'/"$tag"}"
# Quoted replacements: with bash 5.2's patsub_replacement an unquoted `&` (say, in
# RELEASE_URL_BASE) would stand for the matched text.
platform_entries="${entries%$'\n'}"
manifest="${manifest//'${PLATFORMS}'/"$platform_entries"}"
printf '%s\n' "$manifest" >"$out/karpenter.yaml"
echo "wrote $out/karpenter.yaml" >&2
if $default_out && ! $host_only; then
  cp "$out/karpenter.yaml" "$root/krew/karpenter.yaml"
  echo "wrote $root/krew/karpenter.yaml" >&2
fi

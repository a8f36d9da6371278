#!/usr/bin/env bash
# The cargo that scripts/build.mjs hands to @napi-rs/cli when TOLLGATE_NODE_SHARED_TARGET=1 (the
# test suite sets it). `napi build` always passes `--target <triple>`, and cargo builds an
# explicit target into target/<triple>/ from scratch: minutes of dependencies that the workspace
# build already compiled into target/<profile>/. For the host triple this drops `--target`, so
# the addon builds beside everything else, then links it where napi looks for it. It builds with
# the workspace's feature set (`--workspace --all-targets`, what the test suite builds): the addon
# alone resolves other features for ~250 shared dependencies and compiled them all again.
set -euo pipefail
host="$(rustc -vV | sed -n 's/^host: //p')"
args=()
triple=""
profile=debug
while (($#)); do
  if [[ "$1" == "--target" && "${2:-}" == "$host" ]]; then
    triple="$2"
    shift 2
    continue
  fi
  [[ "$1" == "--release" ]] && profile=release
  args+=("$1")
  shift
done
if [[ "${args[0]:-}" == "build" ]]; then
  args+=(--workspace --all-targets)
fi
cargo "${args[@]}"
[[ -n "$triple" && "${args[0]:-}" == "build" ]] || exit 0
target="$(cargo metadata --format-version 1 --no-deps | node -e 'process.stdout.write(JSON.parse(require("fs").readFileSync(0)).target_directory)')"
mkdir -p "$target/$triple/$profile"
ln -sf "$target/$profile/libtollgate_node.so" "$target/$triple/$profile/libtollgate_node.so"

#!/usr/bin/env bash
# Builds every plugin crate of a guest workspace for wasm32-wasip2 and installs
# each one that has a `reson-plugin.toml` into a plugins directory as
# `<name>.wasm` + `<name>.toml`.
#
#   plugins/build.sh [--workspace DIR] [OUT_DIR]
#
# DIR defaults to plugins/ and OUT_DIR to target/plugins. Files whose
# content did not change are left alone, so a watching host does not reload.
# The crates compile into RESON_WASM_TARGET_DIR (default target/wasm), which
# the tests and the host's build script share, so each plugin builds once.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
workspace="$root/plugins"
if [ "${1:-}" = "--workspace" ]; then
  workspace=$(cd "$2" && pwd)
  shift 2
fi
out=${1:-"$root/target/plugins"}
target_dir=${RESON_WASM_TARGET_DIR:-"$root/target/wasm"}

if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi

cargo build --quiet --release --target wasm32-wasip2 \
  --manifest-path "$workspace/Cargo.toml" --target-dir "$target_dir"

mkdir -p "$out"
for manifest in "$workspace"/*/reson-plugin.toml; do
  [ -f "$manifest" ] || continue
  crate_dir=$(dirname "$manifest")
  crate=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$crate_dir/Cargo.toml" | head -n1)
  name=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$manifest" | head -n1)
  wasm="$target_dir/wasm32-wasip2/release/${crate//-/_}.wasm"
  if [ ! -f "$wasm" ]; then
    echo "warning: $crate_dir has a reson-plugin.toml but is not a workspace member; skipped" >&2
    continue
  fi
  for pair in "$wasm:$out/$name.wasm" "$manifest:$out/$name.toml"; do
    src=${pair%%:*} dst=${pair#*:}
    if ! cmp -s "$src" "$dst"; then
      # A temporary of its own: the tests may run this script side by side.
      cp "$src" "$dst.tmp.$$" && mv "$dst.tmp.$$" "$dst"
    fi
  done
done
echo "plugins installed in $out"

#!/usr/bin/env bash
# The peers benchmark in one command: the same JSON echo as a Reson tool,
# on bare wasmtime, Extism, wasmi and in native Rust, in one release run.
#
#   bash host/benches/peers/run.sh [criterion args…]
#
# Builds the echo component (plugins/build.sh) and the core-module guests
# (guests/, wasm32-unknown-unknown); cargo leaves both alone when they are
# up to date. The bench crate is outside the workspace and out of CI; set
# CARGO_TARGET_DIR to share a release build of wasmtime with the host's.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)

for target in wasm32-wasip2 wasm32-unknown-unknown; do
  if ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
  fi
done

bash "$root/plugins/build.sh" "$root/target/plugins"
cargo build --quiet --release --target wasm32-unknown-unknown \
  --manifest-path "$here/guests/Cargo.toml" --target-dir "$root/target/wasm"

cargo bench --manifest-path "$here/Cargo.toml" --bench peers -- "$@"

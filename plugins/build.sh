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
#
# A plugin directory with an `app.py` is a Python plugin (run-code), made by
# componentize-py, which comes from PyPI and not with cargo: so it is built
# only when componentize-py is found (RESON_COMPONENTIZE_PY, the plugin's
# .venv, target/toolchains/python as the tests install it, or PATH), and
# otherwise skipped with a note saying how to get it. RESON_PYTHON_PLUGINS
# says what to do: `auto` (that, the default), `require` (fail without it)
# or `skip` (leave them out, as the host's build script and most tests do,
# so the binary and the suite do not depend on what this machine has).
# A skipped plugin is removed from OUT_DIR, so OUT_DIR holds what the
# build made and nothing older. A Python build is reused while its sources,
# the contract and the componentize-py version are unchanged.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
workspace="$root/plugins"
if [ "${1:-}" = "--workspace" ]; then
  workspace=$(cd "$2" && pwd)
  shift 2
fi
out=${1:-"$root/target/plugins"}
target_dir=${RESON_WASM_TARGET_DIR:-"$root/target/wasm"}
python_mode=${RESON_PYTHON_PLUGINS:-auto}
case "$python_mode" in auto | require | skip) ;; *)
  echo "RESON_PYTHON_PLUGINS is \`$python_mode\`; use auto, require or skip" >&2
  exit 2
  ;;
esac
componentize_version=$(tr -d '[:space:]' < "$root/plugins/componentize-py.version")

# Copies $1 to $2 unless $2 has the same bytes already.
install_file() {
  if ! cmp -s "$1" "$2"; then
    # A temporary of its own: the tests may run this script side by side.
    cp "$1" "$2.tmp.$$" && mv "$2.tmp.$$" "$2"
  fi
}

# componentize-py for the Python plugin in $1, or nothing.
find_componentize() {
  local candidate
  for candidate in "${RESON_COMPONENTIZE_PY:-}" "$1/.venv/bin/componentize-py" \
    "$root/target/toolchains/python/bin/componentize-py" "$(command -v componentize-py || true)"; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then
      echo "$candidate"
      return
    fi
  done
}

# Builds the Python plugin in directory $1 named $2 into $out, or skips it.
build_python() {
  local dir=$1 name=$2 componentize cache key
  if [ "$python_mode" != skip ]; then
    componentize=$(find_componentize "$dir")
  fi
  if [ -z "${componentize:-}" ]; then
    rm -f "$out/$name.wasm" "$out/$name.toml"
    [ "$python_mode" = skip ] && return
    local hint="python3 -m venv $dir/.venv && $dir/.venv/bin/pip install componentize-py==$componentize_version"
    if [ "$python_mode" = require ]; then
      echo "error: $name is a Python plugin and needs componentize-py: $hint" >&2
      exit 1
    fi
    echo "note: $name (Python) skipped: it needs componentize-py $componentize_version; $hint" >&2
    return
  fi
  cache="$target_dir/python"
  mkdir -p "$cache"
  key=$( (cd "$dir" && find app.py reson-plugin.toml packages -type f 2>/dev/null | LC_ALL=C sort | xargs sha256sum
    cat "$root"/wit/*.wit | sha256sum
    "$componentize" --version) | sha256sum | cut -d' ' -f1)
  if [ ! -f "$cache/$name.wasm" ] || [ "$(cat "$cache/$name.key" 2>/dev/null)" != "$key" ]; then
    echo "building $name with $componentize…" >&2
    (cd "$dir" && "$componentize" --wit-path "$root/wit" --world tool-plugin componentize app \
      --python-path "$dir" --output "$cache/$name.wasm.tmp.$$" >/dev/null)
    mv "$cache/$name.wasm.tmp.$$" "$cache/$name.wasm"
    echo "$key" >"$cache/$name.key"
  fi
  install_file "$cache/$name.wasm" "$out/$name.wasm"
  install_file "$dir/reson-plugin.toml" "$out/$name.toml"
}

if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  rustup target add wasm32-wasip2
fi

cargo build --quiet --release --target wasm32-wasip2 \
  --manifest-path "$workspace/Cargo.toml" --target-dir "$target_dir"

mkdir -p "$out"
for manifest in "$workspace"/*/reson-plugin.toml; do
  [ -f "$manifest" ] || continue
  crate_dir=$(dirname "$manifest")
  name=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$manifest" | head -n1)
  if [ -f "$crate_dir/app.py" ]; then
    build_python "$crate_dir" "$name"
    continue
  fi
  crate=$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$crate_dir/Cargo.toml" | head -n1)
  wasm="$target_dir/wasm32-wasip2/release/${crate//-/_}.wasm"
  if [ ! -f "$wasm" ]; then
    echo "warning: $crate_dir has a reson-plugin.toml but is not a workspace member; skipped" >&2
    continue
  fi
  install_file "$wasm" "$out/$name.wasm"
  install_file "$manifest" "$out/$name.toml"
done
echo "plugins installed in $out"

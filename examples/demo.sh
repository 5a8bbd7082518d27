#!/usr/bin/env bash
# The main job, offline: build the host and the bundled plugins (installing
# the wasm32-wasip2 target if needed), then drive the fs tools on a copy of
# examples/workspace through `reson tool call`, the way a tool author tests
# a tool without a model. The agent loop will take over this demo.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

bash plugins/build.sh target/plugins
cargo build --quiet -p reson
reson="$root/target/debug/reson"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r examples/workspace "$work/workspace"
cat > "$work/reson.toml" <<TOML
plugins_dir = "$root/target/plugins"
lock_file = "reson.lock"

[plugins.fs]
dirs = [{ path = "workspace", access = "read-write" }]
limits = { timeout_ms = 5000 }
TOML
ws=$(cd "$work/workspace" && pwd -P)
export RESON_CONFIG="$work/reson.toml"

step() { printf '\n\033[1m$ reson %s\033[0m\n' "$*"; "$reson" "$@"; }

step plugins list
step tool list
step tool call echo '{"text":"hello from a sandboxed component"}'
step tool call glob "{\"pattern\":\"**/*\"}"
step tool call grep "{\"pattern\":\"TODO\"}"
step tool call edit "{\"path\":\"$ws/src/main.rs\",\"old_string\":\"\\\"hello\\\"\",\"new_string\":\"\\\"bonjour\\\"\"}"
step tool call read "{\"path\":\"src/main.rs\"}"
step tool call write "{\"path\":\"notes/done.txt\",\"content\":\"renamed greeting\\n\"}"
step tool call list '{"path":"notes"}'

printf '\n\033[1mWhat the sandbox refuses:\033[0m\n'
set +e
step tool call read '{"path":"/etc/passwd"}'
echo "(exit code $?: denied)"
step tool call echo '{"text": 42}'
echo "(exit code $?: invalid arguments, the plugin never ran)"

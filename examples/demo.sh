#!/usr/bin/env bash
# The main job, offline: build the host and the bundled plugins (installing
# the wasm32-wasip2 target if needed), run an agent on the bundled scripted
# provider that uses the sandboxed fs tools on a copy of examples/workspace,
# and show its trace, what it changed and its offline replay. Then a rewind
# that puts the files back, and what the sandbox refuses.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# The Rust plugins: the demo does not run Python, and a machine with
# componentize-py would otherwise add (and compile) run-code to them.
RESON_PYTHON_PLUGINS=skip bash plugins/build.sh target/plugins
# Commands plugins start run in a jail made with bubblewrap.
if ! [ -x /usr/bin/bwrap ]; then
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap
fi
cargo build --quiet -p reson
# Where cargo put it: CARGO_TARGET_DIR or a config may move target/.
target_dir=$(cargo metadata --format-version 1 --no-deps |
    sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
reson="$target_dir/debug/reson"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r examples/workspace "$work/workspace"
cat > "$work/reson.toml" <<TOML
plugins_dir = "$root/target/plugins"
lock_file = "reson.lock"
traces_dir = "traces"

[permissions]
# The default preset asks before writes; the demo's changes are allowed
# up front, inside the workspace only.
rules = [{ decision = "allow", tool = "{write,edit}", pattern = "{src,notes}/**", examples = ["src/main.rs", "notes/done.txt"], counter_examples = ["../outside.txt", "/etc/passwd"] }]

[plugins.fs]
dirs = [{ path = "workspace", access = "read-write" }]
limits = { timeout_ms = 5000 }

[plugins.shell]
dirs = [{ path = "workspace", access = "read-write" }]
process = ["ls *"]
TOML
ws=$(cd "$work/workspace" && pwd -P)
export RESON_CONFIG="$work/reson.toml"

step() { printf '\n\033[1m$ reson %s\033[0m\n' "$*"; "$reson" "$@"; }

step plugins list
step run "Rename the greeting to bonjour and note the change" --script "$root/examples/scripts/rename-greeting.json"
trace=$("$reson" traces list --json | sed -n 's/.*"id": "\(tr_[0-9a-f]*\)".*/\1/p' | head -n1)
step traces show "$trace"

printf '\n\033[1mWhat the run changed in the workspace (from its checkpoints):\033[0m\n'
step traces diff "$trace" --from 1 --to 16

printf '\n\033[1mReplay: its plugin calls again, offline, each answered from what it recorded, on a scratch copy of the workspace as the run found it:\033[0m\n'
step traces replay "$trace"

printf '\n\033[1mRewind: a new branch after message 1 (the task), the files put back as they were there; the old branch stays in the tree:\033[0m\n'
step run --trace "$trace" --after 1 --restore-files "Start over, please" --script "$root/examples/scripts/short-answer.json"
echo "src/main.rs again: $(grep -o '"[a-z]*"' "$ws/src/main.rs")"
step traces show "$trace"

printf '\n\033[1mWhat the sandbox refuses:\033[0m\n'
set +e
step tool call read '{"path":"/etc/passwd"}'
echo "(exit code $?: denied)"
step tool call echo '{"text": 42}'
echo "(exit code $?: invalid arguments, the plugin never ran)"
printf '\n\033[1mA granted command runs jailed: $HOME is not there, /tmp is its own:\033[0m\n'
step tool call shell "{\"command\": \"ls -a $HOME /tmp\", \"cwd\": \"$ws\"}"

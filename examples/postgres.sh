#!/usr/bin/env bash
# Reson on PostgreSQL, offline, from a fresh machine: installs Debian's
# postgresql when it is missing, makes a throwaway cluster (Unix socket
# only, removed at exit), builds the host and the bundled plugins, then
#   1. runs an agent on the bundled scripted provider, its trace stored in
#      the database, and shows it from there;
#   2. starts two `reson serve` hosts on that database: a run started on
#      host A is listed as running on host B, stopped from B, and continued
#      on B;
#   3. copies the database's traces into files with `reson traces migrate`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

pg_bin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1; }
if [ -z "$(pg_bin)" ]; then
    echo "installing Debian's postgresql (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
bin=$(pg_bin)

RESON_PYTHON_PLUGINS=skip bash plugins/build.sh target/plugins
cargo build --quiet -p reson
reson="$root/target/debug/reson"

work=$(mktemp -d /tmp/reson-pgdemo-XXXXXX)
pids=()
# PostgreSQL refuses to run as root: its commands run as the package's user.
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    as_pg "$bin/pg_ctl" -D "$work/pg/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/pg"
if [ "$(id -u)" = 0 ]; then
    chmod 755 "$work"
    chown postgres: "$work/pg"
fi
as_pg "$bin/initdb" -D "$work/pg/data" -U postgres --auth=trust -E UTF8 >/dev/null
as_pg "$bin/pg_ctl" -D "$work/pg/data" -l "$work/pg/log" -w \
    -o "-k $work/pg -c listen_addresses=''" start >/dev/null
"$bin/createdb" -h "$work/pg" -U postgres reson
url="postgres://postgres@localhost/reson?host=$work/pg"

cp -r examples/workspace "$work/workspace"
cat > "$work/reson.toml" <<TOML
plugins_dir = "$root/target/plugins"
lock_file = "reson.lock"

[store]
kind = "postgres"
url = "$url"
# A host that dies leaves its running traces to the others after this long.
lease_ms = 3000

[permissions]
rules = [{ decision = "allow", tool = "{write,edit}", pattern = "{src,notes}/**", examples = ["src/main.rs"], counter_examples = ["/etc/passwd"] }]

[plugins.fs]
dirs = [{ path = "workspace", access = "read-write" }]
TOML
export RESON_CONFIG="$work/reson.toml"

step() { printf '\n\033[1m$ reson %s\033[0m\n' "$*"; "$reson" "$@"; }
say() { printf '\n\033[1m%s\033[0m\n' "$*"; }

say "1. An agent whose trace goes into PostgreSQL ($url):"
step run "Rename the greeting to bonjour and note the change" --script "$root/examples/scripts/rename-greeting.json"
step traces list
trace=$("$reson" traces list --json | sed -n 's/.*"id": "\(tr_[0-9a-f]*\)".*/\1/p' | head -n1)
step traces show "$trace"

say "2. Two hosts on one database:"
serve() {
    "$reson" serve --addr 127.0.0.1:0 --script "$root/examples/scripts/slow-survey.json" >"$work/$1.out" 2>"$work/$1.err" &
    pids+=($!)
    for _ in $(seq 100); do
        addr=$(sed -n 's|^listening on \(http://.*\)$|\1|p' "$work/$1.out")
        [ -n "$addr" ] && { echo "$addr"; return; }
        sleep 0.1
    done
    cat "$work/$1.err" >&2
    exit 1
}
# The trace's status as host $1 sees it, once it is $2 (or after 30 s).
wait_status() {
    local status
    for _ in $(seq 300); do
        # The trace comes first in the answer, before its goals and sub-traces.
        status=$(curl -sf "$1/api/traces/$id" | grep -o '"status":"[a-z]*"' | head -n1 | cut -d'"' -f4)
        [ "$status" = "$2" ] && break
        sleep 0.1
    done
    echo "$status"
}
a=$(serve a)
b=$(serve b)
echo "host A: $a   host B: $b"
started=$(curl -sf -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Survey the workspace"}]}' "$a/api/traces")
id=$(echo "$started" | sed -n 's/.*"trace_id":"\([^"]*\)".*/\1/p')
echo "A started $id: $started"
sleep 1
echo "B sees running: $(curl -sf "$b/api/traces/running" | grep -o '"id":"tr_[0-9a-f]*","mode":"[a-z]*"')"
echo "B asks to stop it: $(curl -sf -X POST "$b/api/traces/$id/stop")"
echo "status seen from B: $(wait_status "$b" stopped)"
echo "B continues it: $(curl -sf -H 'Content-Type: application/json' \
    -d '{"messages":[{"role":"user","content":"Go on"}]}' "$b/api/traces/$id/run")"
echo "status seen from A: $(wait_status "$a" completed)"

say "3. The database's traces copied into files:"
step traces migrate --to file --dir "$work/files"
env -u RESON_CONFIG "$reson" --traces-dir "$work/files" traces list

//! A real PostgreSQL for tests and benchmarks: Debian's `postgresql`
//! (installed with apt-get when missing), in a throwaway cluster made with
//! `initdb` under a temporary directory, listening only on a Unix socket
//! there. The cluster is stopped and its directory removed when the test
//! process ends, however it ends (a guard process waits on a pipe that
//! only the test process holds).
//!
//! Shared by the library's store tests, the whole-system tests and the
//! benchmarks (each includes this file with `#[path]`).

#![allow(dead_code, reason = "each test binary uses a different subset")]

// Also included alone (the crates' own tests, some benches), where there is
// no `support::apt` to use.
#[allow(clippy::duplicate_mod)]
#[path = "apt.rs"]
mod apt;

use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

/// The socket's "port": it only names the socket file in the cluster's
/// own directory, so every cluster can use the same one.
const PORT: u16 = 5432;

/// How a cluster keeps its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// fsync off: tests that kill processes need no power-loss safety.
    Fast,
    /// PostgreSQL's defaults (fsync, synchronous commit): for benchmarks.
    Durable,
}

/// A running throwaway PostgreSQL cluster.
pub struct Cluster {
    dir: PathBuf,
    bin: PathBuf,
    durability: Durability,
    /// Held until the process exits; the guard stops the cluster at EOF.
    _guard: Mutex<(Child, ChildStdin)>,
    databases: AtomicU64,
}

/// The cluster shared by every test of this process (fsync off).
pub fn cluster() -> &'static Cluster {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    SHARED.get_or_init(|| Cluster::start(Durability::Fast))
}

/// A durable cluster shared by this process's benchmarks.
pub fn durable_cluster() -> &'static Cluster {
    static SHARED: OnceLock<Cluster> = OnceLock::new();
    SHARED.get_or_init(|| Cluster::start(Durability::Durable))
}

/// The directory holding `initdb`, `pg_ctl` and `postgres`, installing
/// Debian's `postgresql` first when there is none.
pub fn bin_dir() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        apt::ensure(|| find_bin().is_some(), &["postgresql"]);
        find_bin().expect("postgresql is installed")
    })
    .clone()
}

fn find_bin() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").exists() && bin.join("pg_ctl").exists())
        .collect();
    // The newest major version.
    dirs.sort_by_key(|d| {
        d.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
    });
    dirs.pop()
}

/// Whether this process runs as root, where PostgreSQL refuses to run:
/// its commands then run as the `postgres` user the package creates.
fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

impl Cluster {
    /// Makes and starts a new cluster (about a second).
    pub fn start(durability: Durability) -> Self {
        let bin = bin_dir();
        // Short: a Unix socket path has room for about 100 bytes.
        let dir = tempfile::Builder::new().prefix("reson-pg-").tempdir().unwrap().keep();
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status()
                .expect("running chown");
            assert!(status.success(), "chown {} to postgres failed", dir.display());
        }
        let data = dir.join("data");
        let out = as_postgres(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()
            .expect("running initdb");
        assert!(out.status.success(), "initdb failed: {}", String::from_utf8_lossy(&out.stderr));
        let cluster = Self {
            _guard: Mutex::new(guard(&bin, &dir)),
            dir,
            bin,
            durability,
            databases: AtomicU64::new(0),
        };
        cluster.start_server();
        cluster
    }

    /// Starts the server again after [`stop`](Self::stop).
    pub fn start_server(&self) {
        let mut options = format!(
            "-k {} -p {PORT} -c listen_addresses='' -c max_connections=400",
            self.dir.display()
        );
        if self.durability == Durability::Fast {
            options.push_str(" -c fsync=off -c synchronous_commit=off -c full_page_writes=off");
        }
        let out = as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("log"))
            .args(["-w", "-t", "60", "-o", &options, "start"])
            .output()
            .expect("running pg_ctl start");
        assert!(
            out.status.success(),
            "pg_ctl start failed: {}{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
        );
    }

    /// Stops the server at once, as a crash would (`-m immediate`):
    /// connections drop mid-query.
    pub fn stop(&self) {
        let out = as_postgres(&self.bin.join("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "immediate", "-w", "stop"])
            .output()
            .expect("running pg_ctl stop");
        assert!(
            out.status.success(),
            "pg_ctl stop failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The directory holding the server's socket.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// The URL of `database` on this cluster.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@localhost/{database}?host={}&port={PORT}", self.dir.display())
    }

    /// A new, empty database of its own for one test: its URL.
    pub async fn fresh_database(&self) -> String {
        let n = self.databases.fetch_add(1, Ordering::Relaxed);
        let name = format!("t{}_{n}", std::process::id());
        let admin =
            sqlx::PgPool::connect(&self.url("postgres")).await.expect("connecting to PostgreSQL");
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .expect("creating a test database");
        admin.close().await;
        self.url(&name)
    }
}

/// `program` run as the `postgres` user when this process is root.
fn as_postgres(program: &Path) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// A process that stops the cluster in `dir` and removes `dir` when its
/// stdin closes, that is when this process exits, whichever way.
fn guard(bin: &Path, dir: &Path) -> (Child, ChildStdin) {
    let pg_ctl = bin.join("pg_ctl");
    let stop = if is_root() {
        format!("runuser -u postgres -- '{}'", pg_ctl.display())
    } else {
        format!("'{}'", pg_ctl.display())
    };
    let script = format!(
        "read _ ; {stop} -D '{dir}/data' -m immediate -w stop >/dev/null 2>&1 ; rm -rf '{dir}'",
        dir = dir.display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        // Its own process group: a Ctrl-C of the test run reaches the
        // test process, whose exit then closes the pipe.
        .process_group(0)
        .spawn()
        .expect("starting the cluster's guard");
    let stdin = child.stdin.take().unwrap();
    (child, stdin)
}

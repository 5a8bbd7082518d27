//! Jails made ahead. bubblewrap's setup (namespaces, mounts, `/proc`,
//! `/dev`, the masks over `/etc`), the prelude before it and the fork of
//! the host are most of what a jailed command costs. Once a command of a
//! jail spec has ended, a thread of its own starts the next jail of that
//! spec: bubblewrap, with the same arguments a command would get, runs a
//! waiting stage (this very program, started with [`STAGE_FLAG`]) in place
//! of the command. The next command of that spec sends its program,
//! arguments, environment and working directory down a socket to it, and
//! the stage execs the command where it is.
//!
//! A spare is what a jail made now would be only while what its mounts were
//! made from is unchanged: before it is used, the mounts are worked out
//! again (the grants, the repository metadata found a few levels down, a
//! program shown alone, the search path) and compared, file by file; any
//! difference throws the spare away and the command gets a jail made on
//! its path. A spare is used once, by one command; the spares are bounded
//! ([`MAX_SPARES`], one per spec) and forked from a thread that never ends
//! (bubblewrap's `--die-with-parent` watches the thread that forked it).

use super::{Guard, JailError, JailSpec};
use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock, mpsc};
use tokio::process::Child;

/// The argument a spare's waiting stage is started with, followed by the
/// descriptors of its socket and of its own program.
const STAGE_FLAG: &str = "--reson-jail-spare";

/// What the waiting stage says once it waits.
const READY: &[u8] = b"r";

/// How long a jail made ahead may take to come up before it is given up.
const READY_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Most spares held at once: each is three idle processes, a cgroup and a
/// private `/tmp`.
const MAX_SPARES: usize = 4;

/// The program spares wait in, open: set by [`serve`] or [`set_program`].
static PROGRAM: OnceLock<OwnedFd> = OnceLock::new();

/// Runs the waiting stage when this process is one (never returning), and
/// otherwise makes this program the one spares wait in.
pub(crate) fn serve() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() == Some(OsStr::new(STAGE_FLAG)) {
        let fd = |arg: Option<OsString>| arg.and_then(|a| a.to_str()?.parse::<RawFd>().ok());
        let (control, program) = (fd(args.next()), fd(args.next()));
        std::process::exit(wait_and_exec(control, program));
    }
    // A program that cannot open itself leaves every jail made on its path.
    let _ = set_program(Path::new("/proc/self/exe"));
}

/// Makes `program`, a program whose `main` calls [`serve`] first, the one
/// spares wait in. Only the first call of a process counts.
pub(crate) fn set_program(program: &Path) -> io::Result<()> {
    if PROGRAM.get().is_none() {
        let file = std::fs::File::open(program)?;
        let _ = PROGRAM.set(file.into());
    }
    Ok(())
}

/// Whether spares can be made in this process.
pub(super) fn available() -> bool {
    PROGRAM.get().is_some()
}

/// The waiting stage: reads the command from `control` until the host
/// closes it, then execs it. Returns the exit code when it cannot.
fn wait_and_exec(control: Option<RawFd>, program: Option<RawFd>) -> i32 {
    use std::os::unix::process::CommandExt;
    let (Some(control), Some(program)) = (control, program) else {
        eprintln!("reson: {STAGE_FLAG} is how the command jail starts this program, not a command");
        return 2;
    };
    // SAFETY: the jail handed this process both descriptors, for it alone.
    let (mut control, program) = unsafe {
        (std::os::unix::net::UnixStream::from_raw_fd(control), OwnedFd::from_raw_fd(program))
    };
    drop(program);
    // The host counts the jail as made once it waits here.
    if control.write_all(READY).is_err() {
        return 0;
    }
    let mut bytes = Vec::new();
    let read = control.read_to_end(&mut bytes);
    drop(control);
    if read.is_err() || bytes.is_empty() {
        // A spare thrown away: nothing to run.
        return 0;
    }
    let Some(command) = Handed::decode(&bytes) else {
        eprintln!("reson-jail: the command handed to the jail was cut short");
        return 1;
    };
    let mut exec = std::process::Command::new(&command.program);
    exec.args(&command.args).env_clear().envs(command.env.iter().map(|(k, v)| (k, v)));
    exec.current_dir(&command.cwd);
    if !command.stdin {
        // What a command started directly reads when it is given no input.
        exec.stdin(std::process::Stdio::null());
    }
    let error = exec.exec();
    eprintln!("reson-jail: execvp {}: {error}", command.program.to_string_lossy());
    // bubblewrap's code for a command it cannot start.
    1
}

/// What a spare's waiting stage is handed: the command to exec.
#[derive(Debug, PartialEq, Eq)]
struct Handed {
    /// Whether the command reads the pipe bubblewrap was given as stdin;
    /// otherwise it reads `/dev/null`.
    stdin: bool,
    /// Where it starts: the working directory again, so that one made anew
    /// at its path since the jail was made is where it runs.
    cwd: OsString,
    program: OsString,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
}

impl Handed {
    /// Counts, then each string with its length before it.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut put = |bytes: &[u8]| {
            out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
            out.extend_from_slice(bytes);
        };
        put(&u32::try_from(self.args.len()).unwrap_or(u32::MAX).to_le_bytes());
        put(&u32::try_from(self.env.len()).unwrap_or(u32::MAX).to_le_bytes());
        put(&[u8::from(self.stdin)]);
        put(self.cwd.as_bytes());
        put(self.program.as_bytes());
        for arg in &self.args {
            put(arg.as_bytes());
        }
        for (name, value) in &self.env {
            put(name.as_bytes());
            put(value.as_bytes());
        }
        out
    }

    fn decode(mut bytes: &[u8]) -> Option<Self> {
        let mut take = || -> Option<Vec<u8>> {
            let len = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
            let item = bytes.get(4..4 + len)?.to_vec();
            bytes = &bytes[4 + len..];
            Some(item)
        };
        let count = |item: Vec<u8>| Some(u32::from_le_bytes(item.try_into().ok()?) as usize);
        let (args, env) = (count(take()?)?, count(take()?)?);
        let stdin = match take()?.as_slice() {
            [0] => false,
            [1] => true,
            _ => return None,
        };
        let cwd = OsString::from_vec(take()?);
        let program = OsString::from_vec(take()?);
        let args = (0..args).map(|_| take().map(OsString::from_vec)).collect::<Option<_>>()?;
        let env = (0..env)
            .map(|_| Some((OsString::from_vec(take()?), OsString::from_vec(take()?))))
            .collect::<Option<_>>()?;
        Some(Self { stdin, cwd, program, args, env })
    }
}

/// One jail made ahead, waiting for its command.
#[derive(Debug)]
pub(super) struct Spare {
    bwrap: PathBuf,
    spec: JailSpec,
    found: Vec<(PathBuf, Option<(u64, u64)>)>,
    child: Child,
    guard: Guard,
    control: OwnedFd,
}

/// The spares made ahead.
#[derive(Default)]
struct State {
    spares: Vec<Spare>,
    /// Once the spares have ended, none is made any more.
    ended: bool,
}

impl State {
    fn has(&self, bwrap: &Path, spec: &JailSpec) -> bool {
        self.spares.iter().any(|s| s.bwrap == bwrap && s.spec == *spec)
    }
}

fn state() -> std::sync::MutexGuard<'static, State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE.get_or_init(Mutex::default).lock().unwrap_or_else(|e| e.into_inner())
}

/// Held while a spare is made, so that [`end_all`] waits for it.
static MAKING: Mutex<()> = Mutex::new(());

/// Ends every jail made ahead, and the making of any more: their processes
/// killed, their private `/tmp` removed. Waits for one in the making.
pub(crate) fn end_all() {
    state().ended = true;
    let making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let all = std::mem::take(&mut state().spares);
    drop(making);
    drop(all);
}

/// The spare for `spec`, if one waits and is what a jail made now for
/// `program` would be. One still in the making is not waited for: made on
/// the command's path, a jail comes up sooner than that one would (back to
/// back, 8 ms against the 15 ms or so it takes to make one ahead).
pub(super) fn take(bwrap: &Path, spec: &JailSpec, program: &Path) -> Option<Spare> {
    let mut spare = {
        let mut state = state();
        let at = state.spares.iter().position(|s| s.bwrap == bwrap && s.spec == *spec)?;
        state.spares.swap_remove(at)
    };
    if !matches!(spare.child.try_wait(), Ok(None)) {
        return None;
    }
    let now = super::mounts::arguments(spec, Path::new(super::PRIVATE_TMP), program);
    (now.found == spare.found).then_some(spare)
}

impl Spare {
    /// Hands the waiting stage its command. The child is bubblewrap's, as
    /// for a command started directly: its stdin, stdout and stderr are
    /// pipes, it leads a process group of its own and is killed when
    /// dropped.
    pub(super) async fn start(
        self,
        program: &Path,
        args: &[String],
        env: Vec<(String, String)>,
        stdin: bool,
    ) -> Result<(Child, Guard), JailError> {
        use tokio::io::AsyncWriteExt;
        let command = Handed {
            stdin,
            cwd: self.spec.cwd.clone().into(),
            program: program.as_os_str().to_owned(),
            args: args.iter().map(OsString::from).collect(),
            env: env.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
        };
        let control = std::os::unix::net::UnixStream::from(self.control);
        control.set_nonblocking(true)?;
        let mut control = tokio::net::UnixStream::from_std(control)?;
        control.write_all(&command.encode()).await?;
        control.shutdown().await?;
        Ok((self.child, self.guard))
    }
}

/// What to make a spare of.
#[derive(Debug)]
struct Refill {
    bwrap: PathBuf,
    spec: JailSpec,
    program: PathBuf,
    runtime: tokio::runtime::Handle,
}

/// Asks for the next jail of a command's spec when dropped: at once when
/// the command took a jail made ahead, or with the command's guard when its
/// jail was made on its path (the making would slow its start).
#[derive(Debug)]
pub(super) struct Next(Option<Refill>);

impl Next {
    /// The next jail of `spec`, made in the calling runtime; nothing
    /// outside one, or where no program to wait in was set.
    pub(super) fn new(bwrap: &Path, spec: &JailSpec, program: &Path) -> Self {
        let runtime = tokio::runtime::Handle::try_current().ok().filter(|_| available());
        Self(runtime.map(|runtime| Refill {
            bwrap: bwrap.to_path_buf(),
            spec: spec.clone(),
            program: program.to_path_buf(),
            runtime,
        }))
    }

    /// Makes the spare now, off the caller's path, and returns once it is
    /// there (or could not be made).
    pub(super) async fn now(mut self) -> bool {
        let Some(refill) = self.0.take() else { return false };
        let (bwrap, spec) = (refill.bwrap.clone(), refill.spec.clone());
        let (done, made) = tokio::sync::oneshot::channel();
        order(refill, Some(done)) && made.await.is_ok() && state().has(&bwrap, &spec)
    }
}

impl Drop for Next {
    fn drop(&mut self) {
        if let Some(refill) = self.0.take() {
            order(refill, None);
        }
    }
}

type Order = (Refill, Option<tokio::sync::oneshot::Sender<()>>);

/// Asks the maker for `refill`'s spare; `false` where there is no maker or
/// the spares have ended.
fn order(refill: Refill, done: Option<tokio::sync::oneshot::Sender<()>>) -> bool {
    let Some(maker) = maker() else { return false };
    if state().ended {
        return false;
    }
    maker.lock().unwrap_or_else(|e| e.into_inner()).send((refill, done)).is_ok()
}

fn maker() -> Option<&'static Mutex<mpsc::Sender<Order>>> {
    static MAKER: OnceLock<Option<Mutex<mpsc::Sender<Order>>>> = OnceLock::new();
    MAKER
        .get_or_init(|| {
            let (send, receive) = mpsc::channel::<Order>();
            let spawned =
                std::thread::Builder::new().name("reson-jail-spares".into()).spawn(move || {
                    for (refill, done) in receive {
                        make(&refill);
                        if let Some(done) = done {
                            let _ = done.send(());
                        }
                    }
                });
            spawned.is_ok().then(|| Mutex::new(send))
        })
        .as_ref()
}

/// Makes the spare `refill` asks for, unless one of its spec is there or
/// the spares have ended.
fn make(refill: &Refill) {
    let making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let wanted = {
        let state = state();
        !state.ended && !state.has(&refill.bwrap, &refill.spec)
    };
    let made = if wanted {
        let _runtime = refill.runtime.enter();
        made(refill)
            .inspect_err(|e| {
                tracing::debug!("a jail made ahead failed; the next is made on its path: {e}")
            })
            .ok()
    } else {
        None
    };
    let oldest = {
        let mut state = state();
        match made {
            Some(spare) if !state.ended => {
                let oldest = (state.spares.len() >= MAX_SPARES).then(|| state.spares.remove(0));
                state.spares.push(spare);
                oldest
            }
            // Made as the spares ended: it goes at once.
            other => other,
        }
    };
    drop(making);
    // Its processes are killed and its `/tmp` removed, outside the lock.
    drop(oldest);
}

fn made(refill: &Refill) -> Result<Spare, JailError> {
    let program = PROGRAM.get().ok_or_else(|| io::Error::other("no program to wait in"))?;
    let (control, control_end) = super::namespace::socket_pair()?;
    let stage = super::Stage { program: program.try_clone()?, control: control_end };
    let built = super::build_capped(
        &refill.bwrap,
        &refill.spec,
        &refill.program,
        &[],
        &[],
        super::Start::Ahead(stage),
    )?;
    let (mut command, guard, found) = built;
    super::configure(&mut command, true);
    let child = command.spawn().map_err(|e| guard.spawn_error(e))?;
    // Its copy of the stage's end of the socket: once the jail's is gone
    // too, a jail that failed reads as one.
    drop(command);
    // Dropped on failure: its processes are killed, its `/tmp` removed.
    let spare = Spare {
        bwrap: refill.bwrap.clone(),
        spec: refill.spec.clone(),
        found,
        child,
        guard,
        control,
    };
    wait_ready(&spare.control)?;
    Ok(spare)
}

/// Waits until the stage at the other end of `control` says it waits.
fn wait_ready(control: &OwnedFd) -> io::Result<()> {
    let mut control = std::os::unix::net::UnixStream::from(control.try_clone()?);
    control.set_read_timeout(Some(READY_WITHIN))?;
    let mut said = [0u8; 1];
    match control.read_exact(&mut said) {
        Ok(()) if said == READY => Ok(()),
        _ => Err(io::Error::other("the jail made ahead did not come up")),
    }
}

/// The arguments after bubblewrap's `--` for a spare: its waiting stage.
pub(super) fn stage_argv(stage: &super::Stage) -> Vec<OsString> {
    vec![
        format!("/proc/self/fd/{}", stage.program.as_raw_fd()).into(),
        STAGE_FLAG.into(),
        stage.control.as_raw_fd().to_string().into(),
        stage.program.as_raw_fd().to_string().into(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_goes_down_the_socket_whole_and_a_cut_one_is_refused() {
        let command = Handed {
            stdin: false,
            cwd: "/work/x y".into(),
            program: "/bin/sh".into(),
            args: vec![
                "-c".into(),
                "printf '%s\\n' \"$X\"".into(),
                OsString::from_vec(vec![0xff, 0]),
            ],
            env: vec![("X".into(), "a=b\nc".into()), ("EMPTY".into(), "".into())],
        };
        let bytes = command.encode();
        assert_eq!(Handed::decode(&bytes), Some(command));
        for cut in [0, 3, 8, bytes.len() - 1] {
            assert_eq!(Handed::decode(&bytes[..cut]), None, "cut at {cut}");
        }
    }
}

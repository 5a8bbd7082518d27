//! Opening files. WASI's own `open-at` opens whatever the path names, and
//! opening a FIFO blocks inside the host call until a writer appears,
//! where neither epoch interruption nor the call's deadline can reach.
//! This replacement opens non-blocking and decides on the opened handle,
//! never on a look at the path beforehand: another process (or another
//! instance of the plugin) can swap a FIFO in between a look and an open.
//! Anything that is not a regular file or a directory is closed again and
//! refused.

use super::HostState;
use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt as _};
use cap_std::fs::{Dir as CapDir, OpenOptions};
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::OpenMode;
use wasmtime_wasi::filesystem::{Descriptor, Dir, File};
use wasmtime_wasi::p2::bindings::sync::filesystem::types as fs;

/// The `wasi:filesystem` version wasmtime-wasi 48 provides; guests
/// importing older 0.2 versions are matched to it by semver.
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

type OpenAtArgs = (Resource<Descriptor>, fs::PathFlags, String, fs::OpenFlags, fs::DescriptorFlags);

/// What the guest asked of an open, as the OS options, the mode recorded
/// on the descriptor, and whether it creates.
fn open_options(
    path_flags: fs::PathFlags,
    oflags: fs::OpenFlags,
    flags: fs::DescriptorFlags,
) -> (OpenOptions, OpenMode, bool) {
    let mut opts = OpenOptions::new();
    let mut mode = OpenMode::empty();
    let create = oflags.contains(fs::OpenFlags::CREATE);
    if create {
        if oflags.contains(fs::OpenFlags::EXCLUSIVE) {
            opts.create_new(true);
        } else {
            opts.create(true);
        }
        opts.write(true);
        mode |= OpenMode::WRITE;
    }
    if oflags.contains(fs::OpenFlags::TRUNCATE) {
        opts.truncate(true).write(true);
        mode |= OpenMode::WRITE;
    }
    if flags.contains(fs::DescriptorFlags::READ) {
        opts.read(true);
        mode |= OpenMode::READ;
    }
    if flags.contains(fs::DescriptorFlags::WRITE) {
        opts.write(true);
        mode |= OpenMode::WRITE;
    } else {
        // As wasmtime-wasi does: the OS opens it readable, the descriptor's
        // mode still refuses what was not asked for.
        opts.read(true);
        mode |= OpenMode::READ;
    }
    opts.follow(if path_flags.contains(fs::PathFlags::SYMLINK_FOLLOW) {
        FollowSymlinks::Yes
    } else {
        FollowSymlinks::No
    });
    // A FIFO's open then returns at once instead of waiting for the other end.
    #[cfg(unix)]
    cap_std::fs::OpenOptionsExt::custom_flags(&mut opts, libc::O_NONBLOCK);
    (opts, mode, create)
}

impl HostState {
    /// `open-at`, with the checks wasmtime-wasi 48 makes (same errors), and
    /// refusing (`access`) whatever the opened handle turns out not to be a
    /// regular file or a directory.
    fn open_regular_at(
        &mut self,
        fd: &Resource<Descriptor>,
        (path_flags, path, oflags, flags): (
            fs::PathFlags,
            &str,
            fs::OpenFlags,
            fs::DescriptorFlags,
        ),
    ) -> wasmtime::Result<Result<Resource<Descriptor>, fs::ErrorCode>> {
        let Descriptor::Dir(dir) = self.table.get(fd)? else {
            return Ok(Err(fs::ErrorCode::NotDirectory));
        };
        let perms = dir.perms;
        let (opts, mode, create) = open_options(path_flags, oflags, flags);
        let sync = fs::DescriptorFlags::FILE_INTEGRITY_SYNC
            | fs::DescriptorFlags::DATA_INTEGRITY_SYNC
            | fs::DescriptorFlags::REQUESTED_WRITE_SYNC;
        if flags.intersects(sync) {
            return Ok(Err(fs::ErrorCode::Unsupported));
        }
        let changes = fs::OpenFlags::CREATE | fs::OpenFlags::EXCLUSIVE | fs::OpenFlags::TRUNCATE;
        if oflags.contains(fs::OpenFlags::DIRECTORY) && oflags.intersects(changes) {
            return Ok(Err(fs::ErrorCode::Invalid));
        }
        if perms.write_not_permitted() && (create || mode.contains(OpenMode::WRITE)) {
            return Ok(Err(fs::ErrorCode::NotPermitted));
        }
        let opened = dir
            .dir
            .try_clone()
            .map(CapDir::from_std_file)
            .and_then(|dir| dir.open_with(path, &opts))
            .map(cap_std::fs::File::into_std)
            .and_then(|file| file.metadata().map(|meta| (file, meta.file_type())));
        let (file, kind) = match opened {
            Ok(opened) => opened,
            // Opening a FIFO for writing with no reader, or a socket: what
            // is not a regular file is refused the same way every time.
            #[cfg(unix)]
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {
                return Ok(Err(fs::ErrorCode::Access));
            }
            Err(e) => {
                let code = wasmtime_wasi::p2::bindings::filesystem::types::ErrorCode::from(e);
                return Ok(Err(code.into()));
            }
        };
        // The instance's WASI context is built with
        // `allow_blocking_current_thread(true)`; descriptors opened by
        // wasmtime-wasi under it carry the same.
        let descriptor = if kind.is_dir() {
            Descriptor::Dir(Dir::new(file, perms, mode, true))
        } else if oflags.contains(fs::OpenFlags::DIRECTORY) {
            return Ok(Err(fs::ErrorCode::NotDirectory));
        } else if kind.is_file() {
            #[cfg(unix)]
            clear_nonblocking(&file)?;
            if !create && !mode.contains(OpenMode::WRITE) {
                self.file_read(path, &file);
            }
            Descriptor::File(File::new(file, perms, mode, true))
        } else {
            return Ok(Err(fs::ErrorCode::Access));
        };
        Ok(Ok(self.table.push(descriptor)?))
    }
}

/// Turns `O_NONBLOCK` back off, so the file behaves as wasmtime-wasi's own
/// opens do.
#[cfg(unix)]
fn clear_nonblocking(file: &std::fs::File) -> std::io::Result<()> {
    use std::os::fd::AsRawFd as _;
    let fd = file.as_raw_fd();
    // SAFETY: `fd` is open for as long as `file` is borrowed; F_GETFL and
    // F_SETFL only read and set its status flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Replaces `[method]descriptor.open-at` in `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut types = linker.instance(FILESYSTEM_TYPES)?;
    types.func_wrap(
        "[method]descriptor.open-at",
        |mut cx, (fd, path_flags, path, oflags, flags): OpenAtArgs| {
            let opened = cx.data_mut().open_regular_at(&fd, (path_flags, &path, oflags, flags))?;
            Ok((opened,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

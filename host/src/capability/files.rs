//! Opening files. WASI's own `open-at` opens whatever the path names, and
//! opening a FIFO blocks inside the host call until a writer appears,
//! where neither epoch interruption nor the call's deadline can reach. This
//! replacement refuses anything that is not a regular file, a directory or
//! a symlink before handing the open to wasmtime-wasi.

use super::HostState;
use cap_std::fs::Dir as CapDir;
use wasmtime::component::{Linker, Resource};
use wasmtime_wasi::filesystem::{Descriptor, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::sync::filesystem::types::{
    self as fs, Host as _, HostDescriptor as _,
};

/// The `wasi:filesystem` version wasmtime-wasi 48 provides; guests
/// importing older 0.2 versions are matched to it by semver.
const FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

type OpenAtArgs = (Resource<Descriptor>, fs::PathFlags, String, fs::OpenFlags, fs::DescriptorFlags);

impl HostState {
    /// Whether `path` under the directory `fd` names something that may
    /// not be opened (a FIFO, a socket, a device). A path that does not
    /// exist or escapes is left to wasmtime-wasi, which reports it.
    fn special_file(
        &mut self,
        fd: &Resource<Descriptor>,
        path: &str,
        follow: bool,
    ) -> wasmtime::Result<bool> {
        let Descriptor::Dir(dir) = self.table.get(fd)? else { return Ok(false) };
        let Ok(handle) = dir.dir.try_clone() else { return Ok(false) };
        let dir = CapDir::from_std_file(handle);
        let metadata = if follow { dir.metadata(path) } else { dir.symlink_metadata(path) };
        Ok(metadata.is_ok_and(|m| {
            let kind = m.file_type();
            !(kind.is_file() || kind.is_dir() || kind.is_symlink())
        }))
    }
}

/// Replaces `[method]descriptor.open-at` in `linker`.
pub(crate) fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut types = linker.instance(FILESYSTEM_TYPES)?;
    types.func_wrap(
        "[method]descriptor.open-at",
        |mut cx, (fd, path_flags, path, oflags, flags): OpenAtArgs| {
            let state = cx.data_mut();
            let follow = path_flags.contains(fs::PathFlags::SYMLINK_FOLLOW);
            if state.special_file(&fd, &path, follow)? {
                return Ok((Err(fs::ErrorCode::Access),));
            }
            let mut view = state.filesystem();
            Ok((match view.open_at(fd, path_flags, path, oflags, flags) {
                Ok(opened) => Ok(opened),
                Err(err) => Err(view.convert_error_code(err)?),
            },))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

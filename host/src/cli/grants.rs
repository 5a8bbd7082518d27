//! Directory grants the command line adds to the config's before the
//! plugins load.

use reson::config::{Access, DirGrant};
use reson::plugin::Options;
use std::path::PathBuf;

/// Grants plugin `plugin` read access to `dir` (canonical), unless it has
/// that grant already.
pub(crate) fn grant_read(options: &mut Options, plugin: &str, dir: PathBuf) {
    let grant = options.config.plugins.entry(plugin.into()).or_default();
    if !grant.dirs.iter().any(|d| d.path == dir) {
        grant.dirs.push(DirGrant {
            path: dir,
            access: Access::Read,
            mount: None,
            metadata: Access::Read,
        });
    }
}

//! What the runtime tells whoever waits on it about slow work. Its own
//! module, under both the plugin runtime and the capabilities, since both
//! start such work (a compile; a browser).

use std::path::Path;

/// Told when the runtime starts slow work for someone waiting, and when
/// that is over, so that they can be shown why: a component that must be
/// compiled (it is not in the compiled-code cache: seconds to minutes for
/// a large one), a browser started for a plugin's first browser call.
pub trait WorkObserver: Send + Sync {
    /// `plugin`'s `file`, of `bytes` bytes, starts compiling.
    fn compiling(&self, plugin: &str, file: &Path, bytes: usize);
    /// Its compile ended (done or failed).
    fn compiled(&self, plugin: &str);
    /// A browser starts for `plugin` (its session's first browser call).
    fn browser_starting(&self, plugin: &str);
    /// That browser is up, or failed to start.
    fn browser_started(&self, plugin: &str);
}

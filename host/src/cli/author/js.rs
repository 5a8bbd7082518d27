//! placeholder replaced by the js authoring work.

use std::path::{Path, PathBuf};

/// The file only a js project has.
pub(super) const ENTRY: &str = "app.js";

pub(super) fn scaffold(_dir: &Path, _name: &str) -> anyhow::Result<()> {
    anyhow::bail!("js plugins are not supported yet")
}

pub(super) fn build(_dir: &Path, _name: &str, _wit: &Path) -> anyhow::Result<PathBuf> {
    anyhow::bail!("js plugins are not supported yet")
}

//! placeholder replaced by the python authoring work.

use std::path::{Path, PathBuf};

/// The file only a python project has.
pub(super) const ENTRY: &str = "app.py";

pub(super) fn scaffold(_dir: &Path, _name: &str) -> anyhow::Result<()> {
    anyhow::bail!("python plugins are not supported yet")
}

pub(super) fn build(_dir: &Path, _name: &str, _wit: &Path) -> anyhow::Result<PathBuf> {
    anyhow::bail!("python plugins are not supported yet")
}

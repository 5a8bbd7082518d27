//! What a plugin reload tells people: a log line, and a `plugins_changed`
//! frame on every watch socket (the viewer shows it), each naming the
//! plugins that were added, replaced, held back or removed.

use super::events::Channels;
use super::response::to_json;
use reson_sandbox::plugin::{PluginInfo, PluginStatus, Runtime};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// One plugin in a `plugins_changed` frame.
#[derive(Debug, Clone, PartialEq, Serialize)]
struct Changed {
    name: String,
    /// `added`, `replaced`, `removed`, or `status` (the same generation,
    /// whose status changed: a newer file held back or failing).
    change: &'static str,
    version: Option<String>,
    sha256: Option<String>,
    generation: u64,
    status: Option<PluginStatus>,
}

/// The frame: `{"kind":"plugins_changed","plugins":[...]}`.
#[derive(Serialize)]
struct Frame<'a> {
    kind: &'static str,
    plugins: &'a [Changed],
}

/// Follows `runtime`'s reloads until `closing`, announcing each change.
pub(crate) async fn announce(
    runtime: Runtime,
    channels: Arc<Channels>,
    closing: CancellationToken,
) {
    let mut changes = runtime.changes();
    let mut known = by_name(runtime.plugins());
    loop {
        tokio::select! {
            () = closing.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        let now = by_name(runtime.plugins());
        let diff = difference(&known, &now);
        known = now;
        if diff.is_empty() {
            continue;
        }
        let said: Vec<String> = diff.iter().map(describe).collect();
        tracing::info!("plugins changed: {}", said.join("; "));
        match to_json(&Frame { kind: "plugins_changed", plugins: &diff }) {
            Ok(text) => channels.broadcast(text.into()),
            Err(e) => tracing::warn!("plugins_changed frame: {e}"),
        }
    }
}

fn by_name(plugins: Vec<PluginInfo>) -> BTreeMap<String, PluginInfo> {
    plugins.into_iter().map(|p| (p.name.clone(), p)).collect()
}

fn difference(
    before: &BTreeMap<String, PluginInfo>,
    after: &BTreeMap<String, PluginInfo>,
) -> Vec<Changed> {
    let mut out = Vec::new();
    for (name, now) in after {
        let change = match before.get(name) {
            None => "added",
            Some(old) if old.generation != now.generation => "replaced",
            Some(old) if old.status != now.status => "status",
            Some(_) => continue,
        };
        out.push(Changed {
            name: name.clone(),
            change,
            version: now.version.clone(),
            sha256: now.sha256.clone(),
            generation: now.generation,
            status: Some(now.status.clone()),
        });
    }
    for name in before.keys().filter(|n| !after.contains_key(*n)) {
        out.push(Changed {
            name: name.clone(),
            change: "removed",
            version: None,
            sha256: None,
            generation: 0,
            status: None,
        });
    }
    out
}

fn describe(c: &Changed) -> String {
    let version = c.version.as_deref().map(|v| format!(" {v}")).unwrap_or_default();
    let digest = c.sha256.as_deref().map(|d| format!(" sha256 {}", &d[..d.len().min(12)]));
    let status = match &c.status {
        Some(PluginStatus::Failed(e)) => format!(": not loaded: {e}"),
        Some(PluginStatus::Stale(e)) => format!(": the previous version serves: {e}"),
        _ => String::new(),
    };
    format!("{} {}{version}{}{status}", c.name, c.change, digest.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn info(name: &str, generation: u64, status: PluginStatus) -> PluginInfo {
        PluginInfo {
            name: name.into(),
            file: PathBuf::from(format!("{name}.wasm")),
            version: Some("0.1.0".into()),
            description: None,
            world: None,
            tools: Vec::new(),
            refused_tools: Vec::new(),
            sha256: Some("ab".repeat(32)),
            grants: None,
            generation,
            from_cache: false,
            idle_instances: 0,
            trace_sessions: 0,
            signature: None,
            status,
        }
    }

    #[test]
    fn names_what_was_added_replaced_held_back_and_removed() {
        let before = by_name(vec![
            info("a", 1, PluginStatus::Ready),
            info("b", 2, PluginStatus::Ready),
            info("gone", 3, PluginStatus::Ready),
        ]);
        let after = by_name(vec![
            info("a", 4, PluginStatus::Ready),
            info("b", 2, PluginStatus::Stale("asks for more".into())),
            info("new", 5, PluginStatus::Ready),
        ]);
        let diff = difference(&before, &after);
        let changes: Vec<(&str, &str)> = diff.iter().map(|c| (c.name.as_str(), c.change)).collect();
        assert_eq!(
            changes,
            [("a", "replaced"), ("b", "status"), ("new", "added"), ("gone", "removed")]
        );
        assert!(difference(&after, &after).is_empty());
    }
}

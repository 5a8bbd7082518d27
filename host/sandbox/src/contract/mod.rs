//! The `reson:plugin` contract: generated bindings, and the check that a
//! component speaks a version of it this host understands.
//!
//! The version travels inside every component: it is part of the name of
//! each interface the component exports (`reson:plugin/tool@0.1.0`).

/// The bindings `wasmtime::component::bindgen!` generates from `wit/`, for
/// the crates that convert between WIT types and their own.
pub mod bindings;

use serde::Serialize;
use std::fmt;
use wasmtime::Engine;
use wasmtime::component::Component;

/// The contract version this host speaks.
pub const CONTRACT_VERSION: &str = "0.1.0";
const PACKAGE: &str = "reson:plugin";

/// Which world a component implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum World {
    /// Exports `reson:plugin/tool`.
    ToolPlugin,
    /// Exports `reson:plugin/provider`.
    ProviderPlugin,
    /// Exports `reson:plugin/plan-parser`.
    PlanParserPlugin,
}

impl World {
    fn from_interface(name: &str) -> Option<Self> {
        match name {
            "tool" => Some(Self::ToolPlugin),
            "provider" => Some(Self::ProviderPlugin),
            "plan-parser" => Some(Self::PlanParserPlugin),
            _ => None,
        }
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ToolPlugin => "tool-plugin",
            Self::ProviderPlugin => "provider-plugin",
            Self::PlanParserPlugin => "plan-parser-plugin",
        })
    }
}

/// Why a component does not fit this host's contract.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContractError {
    /// Built for a contract version this host cannot serve.
    #[error(
        "built for contract {PACKAGE}@{found}, but this host speaks {PACKAGE}@{CONTRACT_VERSION}{hint}",
        hint = version_hint(found)
    )]
    Version {
        /// The version in the component.
        found: String,
    },
    /// Exports no Reson plugin interface.
    #[error(
        "not a Reson plugin: it exports {}, expected one of {PACKAGE}/tool, {PACKAGE}/provider, {PACKAGE}/plan-parser",
        if exports.is_empty() { "nothing".to_owned() } else { exports.join(", ") }
    )]
    WrongWorld {
        /// What it exports instead.
        exports: Vec<String>,
    },
}

fn version_hint(found: &str) -> &'static str {
    match (semver(found), semver(CONTRACT_VERSION)) {
        (Some(guest), Some(host)) if guest > host => {
            " (the plugin is newer than the host: upgrade reson)"
        }
        (Some(_), Some(_)) => " (rebuild the plugin against this contract)",
        _ => "",
    }
}

fn semver(v: &str) -> Option<(u64, u64, u64)> {
    let mut parts = v.split(['.', '-', '+']).map(str::parse::<u64>);
    Some((parts.next()?.ok()?, parts.next()?.ok()?, parts.next()?.ok()?))
}

/// Whether a guest built for `guest` can be served by a host at `host`:
/// same major (and, for 0.x, same minor), and the guest no newer.
pub fn compatible(guest: &str, host: &str) -> bool {
    match (semver(guest), semver(host)) {
        (Some(g), Some(h)) if g.0 == 0 => g.0 == h.0 && g.1 == h.1 && g.2 <= h.2,
        (Some(g), Some(h)) => g.0 == h.0 && (g.1, g.2) <= (h.1, h.2),
        _ => false,
    }
}

/// Finds the world a component implements and checks its contract version.
pub fn inspect(engine: &Engine, component: &Component) -> Result<World, ContractError> {
    let ty = component.component_type();
    let mut others = Vec::new();
    for (name, _) in ty.exports(engine) {
        let Some((interface, version)) = name
            .strip_prefix(PACKAGE)
            .and_then(|rest| rest.strip_prefix('/'))
            .and_then(|rest| rest.split_once('@'))
        else {
            others.push(name.to_owned());
            continue;
        };
        let Some(world) = World::from_interface(interface) else {
            others.push(name.to_owned());
            continue;
        };
        if !compatible(version, CONTRACT_VERSION) {
            return Err(ContractError::Version { found: version.to_owned() });
        }
        return Ok(world);
    }
    Err(ContractError::WrongWorld { exports: others })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_rules() {
        assert!(compatible("0.1.0", "0.1.0"));
        assert!(compatible("0.1.0", "0.1.3"));
        assert!(!compatible("0.1.4", "0.1.3"), "a newer guest is refused");
        assert!(!compatible("0.2.0", "0.1.0"));
        assert!(!compatible("0.0.9", "0.1.0"));
        assert!(compatible("1.2.0", "1.3.0"));
        assert!(!compatible("1.4.0", "1.3.0"));
        assert!(!compatible("2.0.0", "1.3.0"));
        assert!(!compatible("x", "0.1.0"));
    }

    #[test]
    fn version_error_names_both_versions() {
        let msg = ContractError::Version { found: "0.2.0".into() }.to_string();
        assert!(msg.contains("reson:plugin@0.2.0") && msg.contains("reson:plugin@0.1.0"), "{msg}");
        assert!(msg.contains("newer than the host"), "{msg}");
    }
}

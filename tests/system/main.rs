//! The whole-system tests: the host and its binary, real plugin components,
//! real local servers (PostgreSQL, Chromium, an OCI registry, model APIs
//! played by a local server). One binary, one module per area, so the host
//! is linked once, not once per area; `cargo test -p reson --test system
//! -- stores:: hosts::` runs some areas only.
//!
//! The tests of every area run on threads of this one process. A test that
//! measures the whole process (its threads, its open descriptors) runs
//! again in a process of its own (`support::alone`); none sets an
//! environment variable or the current directory.

#[path = "../support/mod.rs"]
mod support;

mod agent;
mod api;
mod authoring;
mod authoring_js;
mod authoring_python;
mod branches;
mod browser;
mod checkpoints;
mod documents;
mod examples;
mod hardening;
mod hosts;
mod hot_reload;
mod human;
mod init;
mod jail;
mod knowledge;
mod layering;
mod learning;
mod lsp;
mod mcp;
mod permissions;
mod pg_failure;
mod plugin_runtime;
mod process;
mod providers;
mod registry;
mod replay;
mod run_code;
mod sandbox;
mod secrets;
mod signing;
mod stores;
mod sub_agents;
mod task;
mod telemetry;
mod terminal;
mod users;
mod viewer;
mod web_search;

//! Guest bindings generated from `wit/`, one module per world.
//!
//! The interfaces the worlds share (`types`, `log`, `config`, `http`,
//! `process`) are generated once, in `tool_world`, and reused by the others
//! so that a value from one world's bindings is usable with another's.

/// Bindings for the `tool-plugin` world.
pub mod tool_world {
    wit_bindgen::generate!({
        path: "../wit",
        world: "reson:plugin/tool-plugin",
        pub_export_macro: true,
        export_macro_name: "export_tool_world",
        default_bindings_module: "reson_sdk::bindings::tool_world",
        generate_all,
    });
}

/// Bindings for the `provider-plugin` world.
pub mod provider_world {
    wit_bindgen::generate!({
        path: "../wit",
        world: "reson:plugin/provider-plugin",
        pub_export_macro: true,
        export_macro_name: "export_provider_world",
        default_bindings_module: "reson_sdk::bindings::provider_world",
        with: {
            "reson:plugin/types@0.1.0": crate::bindings::tool_world::reson::plugin::types,
            "reson:plugin/log@0.1.0": crate::bindings::tool_world::reson::plugin::log,
            "reson:plugin/config@0.1.0": crate::bindings::tool_world::reson::plugin::config,
            "reson:plugin/http@0.1.0": crate::bindings::tool_world::reson::plugin::http,
            "reson:plugin/process@0.1.0": crate::bindings::tool_world::reson::plugin::process,
        },
        generate_all,
    });
}

/// Bindings for the `plan-parser-plugin` world.
pub mod plan_parser_world {
    wit_bindgen::generate!({
        path: "../wit",
        world: "reson:plugin/plan-parser-plugin",
        pub_export_macro: true,
        export_macro_name: "export_plan_parser_world",
        default_bindings_module: "reson_sdk::bindings::plan_parser_world",
        with: {
            "reson:plugin/log@0.1.0": crate::bindings::tool_world::reson::plugin::log,
            "reson:plugin/config@0.1.0": crate::bindings::tool_world::reson::plugin::config,
            "reson:plugin/http@0.1.0": crate::bindings::tool_world::reson::plugin::http,
            "reson:plugin/process@0.1.0": crate::bindings::tool_world::reson::plugin::process,
        },
        generate_all,
    });
}

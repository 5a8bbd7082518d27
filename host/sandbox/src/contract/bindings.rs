//! Host-side bindings of the three worlds. Interfaces shared between the
//! worlds are generated once, in `tool`, so one set of host trait impls
//! (in `capability/`) serves every world.

/// The `tool-plugin` world.
pub mod tool {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "reson:plugin/tool-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "reson:plugin/http.body-stream": crate::capability::http::BodyStream,
        },
    });
}

/// The `provider-plugin` world.
pub mod provider {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "reson:plugin/provider-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "reson:plugin/types": super::tool::reson::plugin::types,
            "reson:plugin/log": super::tool::reson::plugin::log,
            "reson:plugin/config": super::tool::reson::plugin::config,
            "reson:plugin/http": super::tool::reson::plugin::http,
            "reson:plugin/process": super::tool::reson::plugin::process,
        },
    });
}

/// The `plan-parser-plugin` world.
pub mod plan_parser {
    wasmtime::component::bindgen!({
        path: "../../wit",
        world: "reson:plugin/plan-parser-plugin",
        imports: { default: async | trappable },
        exports: { default: async },
        with: {
            "reson:plugin/log": super::tool::reson::plugin::log,
            "reson:plugin/config": super::tool::reson::plugin::config,
            "reson:plugin/http": super::tool::reson::plugin::http,
            "reson:plugin/process": super::tool::reson::plugin::process,
        },
    });
}

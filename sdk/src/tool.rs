//! The tool-author API: typed tools collected in a [`Toolbox`].

use crate::bindings::tool_world::exports::reson::plugin::tool as wit;
use crate::bindings::tool_world::reson::plugin::types::{Image as WitImage, ToolSpec};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use std::fmt::Display;
use std::path::{Path, PathBuf};

/// What the host says about the call being served.
#[derive(Debug, Clone, Default)]
pub struct Context {
    /// Id of the tool call as the model produced it (empty outside a run).
    pub call_id: String,
    /// The trace the call belongs to, if any.
    pub trace_id: Option<String>,
    /// Directory relative paths resolve against (the first granted one).
    pub cwd: Option<String>,
}

impl Context {
    /// Resolves `path` against [`Context::cwd`]; absolute paths stay as they are.
    pub fn resolve(&self, path: impl AsRef<Path>) -> PathBuf {
        let path = path.as_ref();
        match &self.cwd {
            Some(cwd) if path.is_relative() => Path::new(cwd).join(path),
            _ => path.to_path_buf(),
        }
    }
}

/// A successful tool result.
#[derive(Debug, Clone, Default)]
pub struct Output {
    text: String,
    long_term_memory: Option<String>,
    once: bool,
    images: Vec<(String, Vec<u8>)>,
}

impl Output {
    /// A result carrying `text` for the model.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: text.into(), ..Self::default() }
    }

    /// A short summary that replaces the text in later history.
    pub fn with_memory(mut self, summary: impl Into<String>) -> Self {
        self.long_term_memory = Some(summary.into());
        self
    }

    /// Send the full text to the model once; afterwards only the summary.
    pub fn once(mut self) -> Self {
        self.once = true;
        self
    }

    /// Attaches an image (`media_type` such as `image/png`, raw bytes).
    pub fn with_image(mut self, media_type: impl Into<String>, data: Vec<u8>) -> Self {
        self.images.push((media_type.into(), data));
        self
    }
}

/// Why a tool failed; the message goes back to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolError {
    /// The arguments parsed but cannot be used.
    InvalidArguments(String),
    /// The host refused a capability the tool needed.
    Denied(String),
    /// Anything else.
    Failed(String),
}

impl ToolError {
    /// A [`ToolError::InvalidArguments`] from anything displayable.
    pub fn invalid(message: impl Display) -> Self {
        Self::InvalidArguments(message.to_string())
    }

    /// A [`ToolError::Failed`] from anything displayable.
    pub fn failed(message: impl Display) -> Self {
        Self::Failed(message.to_string())
    }
}

impl From<std::io::Error> for ToolError {
    fn from(err: std::io::Error) -> Self {
        match err.kind() {
            std::io::ErrorKind::PermissionDenied => Self::Denied(err.to_string()),
            _ => Self::Failed(err.to_string()),
        }
    }
}

type Handler = Box<dyn Fn(&str, &Context) -> Result<Output, ToolError>>;

struct Tool {
    name: String,
    description: String,
    /// Derives the input schema. Only `list` needs it, and the toolbox is
    /// built anew for every call: deriving it there was most of a small
    /// tool's call.
    schema: fn() -> String,
    run: Handler,
}

/// The tools one component serves. Build it in a function and hand that
/// function to [`export_tools!`](crate::export_tools).
#[derive(Default)]
pub struct Toolbox {
    tools: Vec<Tool>,
}

impl Toolbox {
    /// An empty toolbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the tool `name`. Its input schema is derived from `A`, and the
    /// JSON arguments are deserialised into `A` before `run` sees them.
    pub fn tool<A, F>(mut self, name: &str, description: &str, run: F) -> Self
    where
        A: DeserializeOwned + JsonSchema,
        F: Fn(A, &Context) -> Result<Output, ToolError> + 'static,
    {
        self.tools.push(Tool {
            name: name.to_owned(),
            description: description.to_owned(),
            schema: || {
                serde_json::to_string(&schemars::schema_for!(A))
                    .expect("a derived JSON Schema always serialises")
            },
            run: Box::new(move |args, ctx| {
                let args: A = serde_json::from_str(args).map_err(ToolError::invalid)?;
                run(args, ctx)
            }),
        });
        self
    }

    #[doc(hidden)]
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools
            .iter()
            .map(|t| ToolSpec {
                name: t.name.clone(),
                description: t.description.clone(),
                input_schema: (t.schema)(),
            })
            .collect()
    }

    #[doc(hidden)]
    pub fn dispatch(
        &self,
        name: &str,
        args: &str,
        ctx: wit::CallContext,
    ) -> Result<wit::ToolOutput, wit::ToolError> {
        let Some(tool) = self.tools.iter().find(|t| t.name == name) else {
            return Err(wit::ToolError::UnknownTool(name.to_owned()));
        };
        let ctx = Context { call_id: ctx.call_id, trace_id: ctx.trace_id, cwd: ctx.cwd };
        match (tool.run)(args, &ctx) {
            Ok(out) => Ok(wit::ToolOutput {
                text: out.text,
                long_term_memory: out.long_term_memory,
                include_output_only_once: out.once,
                images: out
                    .images
                    .into_iter()
                    .map(|(media_type, data)| WitImage { media_type, data })
                    .collect(),
            }),
            Err(ToolError::InvalidArguments(m)) => Err(wit::ToolError::InvalidArguments(m)),
            Err(ToolError::Denied(m)) => Err(wit::ToolError::Denied(m)),
            Err(ToolError::Failed(m)) => Err(wit::ToolError::Failed(m)),
        }
    }
}

/// Exports the tools built by a `fn() -> Toolbox` as this component's
/// `reson:plugin/tool` interface. Use it once per component.
#[macro_export]
macro_rules! export_tools {
    ($toolbox:path) => {
        struct __ResonToolPlugin;

        impl $crate::bindings::tool_world::exports::reson::plugin::tool::Guest for __ResonToolPlugin {
            fn list() -> ::std::vec::Vec<$crate::bindings::tool_world::reson::plugin::types::ToolSpec> {
                $toolbox().specs()
            }

            fn call(
                name: ::std::string::String,
                args: ::std::string::String,
                context: $crate::bindings::tool_world::exports::reson::plugin::tool::CallContext,
            ) -> ::std::result::Result<
                $crate::bindings::tool_world::exports::reson::plugin::tool::ToolOutput,
                $crate::bindings::tool_world::exports::reson::plugin::tool::ToolError,
            > {
                $toolbox().dispatch(&name, &args, context)
            }
        }

        // Natively the crate is a library (its tests, the fuzz targets): the
        // component's export symbols exist only in the WebAssembly build.
        #[cfg(target_family = "wasm")]
        $crate::bindings::tool_world::export_tool_world!(__ResonToolPlugin with_types_in $crate::bindings::tool_world);
        #[cfg(not(target_family = "wasm"))]
        const _: () = {
            let _ = $toolbox;
        };
    };
}

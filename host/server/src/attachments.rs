//! Files sent with a run request's message: an image joins it as an
//! image part (each provider sends it in its vendor's format); a PDF is
//! read by the bundled `pdf` plugin inside the sandbox, never by the host,
//! and its text and images join the message.

use crate::error::ApiError;
use crate::state::AppState;
use base64::Engine as _;
use reson_sandbox::plugin::CallContext;
use reson_trace::{ContentPart, ToolCall};
use serde::Deserialize;
use std::sync::atomic::{AtomicU64, Ordering};
use utoipa::ToSchema;

/// The tool that reads PDFs.
const READ_PDF: &str = "read_pdf";
/// The largest image attached.
const MAX_IMAGE: u64 = 20 << 20;

/// A file sent with a message.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Attachment {
    /// Its name, as the model sees it.
    name: String,
    /// Its bytes, base64: a PNG, JPEG, GIF or WebP image, or a PDF.
    data: String,
}

/// The parts `attachments` add to a message, in order.
pub(crate) async fn parts(
    state: &AppState,
    attachments: Vec<Attachment>,
) -> Result<Vec<ContentPart>, ApiError> {
    let mut parts = Vec::new();
    for attachment in attachments {
        let name = attachment.name.replace(['\n', '\r'], " ");
        let bytes =
            base64::engine::general_purpose::STANDARD.decode(attachment.data.trim()).map_err(
                |e| ApiError::BadRequest(format!("attachment {name}: `data` is not base64: {e}")),
            )?;
        if bytes.starts_with(b"%PDF-") {
            parts.extend(read_pdf(state, &name, &bytes).await?);
            continue;
        }
        let Some(media_type) = reson_trace::sniff_image_type(&bytes) else {
            return Err(ApiError::BadRequest(format!(
                "attachment {name}: only images (PNG, JPEG, GIF, WebP) and PDFs can be attached"
            )));
        };
        reson_trace::check_image(media_type, &bytes, MAX_IMAGE)
            .map_err(|e| ApiError::BadRequest(format!("attachment {name}: {e}")))?;
        parts.push(ContentPart::Text { text: format!("\n[attached image {name}]") });
        parts.push(ContentPart::image_data(media_type, &bytes));
    }
    Ok(parts)
}

/// Removes an upload however its reading ends.
struct Upload(std::path::PathBuf);

impl Drop for Upload {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The text and images the `pdf` plugin reads from `bytes`.
async fn read_pdf(
    state: &AppState,
    name: &str,
    bytes: &[u8],
) -> Result<Vec<ContentPart>, ApiError> {
    static UPLOADS: AtomicU64 = AtomicU64::new(0);
    let Some(dir) = &state.config.uploads_dir else {
        return Err(ApiError::BadRequest(format!(
            "attachment {name}: this server takes no PDFs (no uploads directory is granted to the \
             pdf plugin; `reson serve` sets one up)"
        )));
    };
    if !state.tools.specs().iter().any(|t| t.name == READ_PDF) {
        return Err(ApiError::BadRequest(format!(
            "attachment {name}: reading a PDF needs the `pdf` plugin in the plugins directory"
        )));
    }
    let n = UPLOADS.fetch_add(1, Ordering::Relaxed);
    let upload = Upload(dir.join(format!("{}-{n}.pdf", std::process::id())));
    std::fs::write(&upload.0, bytes)
        .map_err(|e| ApiError::Internal(format!("keeping attachment {name}: {e}")))?;
    let call = ToolCall {
        id: "attachment".into(),
        name: READ_PDF.into(),
        arguments: serde_json::json!({ "path": reson_sandbox::policy::guest_path(&upload.0) })
            .to_string(),
    };
    let result = state.tools.call(&call, &CallContext::default()).await;
    if !result.ok {
        return Err(ApiError::BadRequest(format!("attachment {name}: {}", result.text)));
    }
    // The plugin names the file by its upload path; the model hears its name.
    let text = result.text.replacen(&reson_sandbox::policy::guest_path(&upload.0), name, 1);
    let mut parts = vec![ContentPart::Text { text: format!("\n[attached PDF {name}]\n{text}") }];
    for image in result.images {
        parts.push(ContentPart::image_data(&image.media_type, &image.data));
    }
    Ok(parts)
}

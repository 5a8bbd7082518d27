//! `reson run --attach FILE`: images and PDFs as part of the user's
//! message. An image goes to the model as an image part, in each vendor's
//! format (the providers convert it). A PDF is read by the bundled `pdf`
//! plugin inside the sandbox, never by the host: its text and images join
//! the message. The plugin is granted the PDF's directory, read-only, for
//! this run.

use anyhow::Context as _;
use reson::plugin::{CallContext, Options};
use reson::tools::ToolRegistry;
use reson::trace::{ContentPart, ToolCall};
use std::path::{Path, PathBuf};

/// The plugin that reads PDFs, and its tool.
const PDF_PLUGIN: &str = "pdf";
const READ_PDF: &str = "read_pdf";

/// The largest image attached.
const MAX_IMAGE: u64 = 20 << 20;

/// What a file is.
enum Kind {
    /// An image of this media type.
    Image(&'static str),
    Pdf,
}

fn kind(path: &Path, head: &[u8]) -> anyhow::Result<Kind> {
    if head.starts_with(b"%PDF-") {
        return Ok(Kind::Pdf);
    }
    match reson::trace::sniff_image_type(head) {
        Some(media_type) => Ok(Kind::Image(media_type)),
        None => anyhow::bail!(
            "cannot attach {}: only images (PNG, JPEG, GIF, WebP) and PDFs can be attached",
            path.display()
        ),
    }
}

/// The first bytes of `path`, enough to tell what it is.
fn head(path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut head = Vec::with_capacity(64);
    std::fs::File::open(path)
        .with_context(|| format!("cannot attach {}", path.display()))?
        .take(64)
        .read_to_end(&mut head)
        .with_context(|| format!("cannot attach {}", path.display()))?;
    Ok(head)
}

/// Grants the `pdf` plugin read access to the directory of each PDF in
/// `files`, before the plugins load.
pub(crate) fn grant(options: &mut Options, files: &[PathBuf]) -> anyhow::Result<()> {
    for file in files {
        let file =
            file.canonicalize().with_context(|| format!("cannot attach {}", file.display()))?;
        if !matches!(kind(&file, &head(&file)?)?, Kind::Pdf) {
            continue;
        }
        let dir = file.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("/"));
        super::grants::grant_read(options, PDF_PLUGIN, dir);
    }
    Ok(())
}

/// The parts `files` add to the message, in order.
pub(crate) async fn parts(
    files: &[PathBuf],
    tools: &ToolRegistry,
) -> anyhow::Result<Vec<ContentPart>> {
    let mut parts = Vec::new();
    for file in files {
        let file =
            file.canonicalize().with_context(|| format!("cannot attach {}", file.display()))?;
        let name = file
            .file_name()
            .map_or_else(|| file.display().to_string(), |n| n.to_string_lossy().into_owned());
        match kind(&file, &head(&file)?)? {
            Kind::Image(media_type) => {
                let data = std::fs::read(&file)
                    .with_context(|| format!("cannot attach {}", file.display()))?;
                reson::trace::check_image(media_type, &data, MAX_IMAGE)
                    .with_context(|| format!("cannot attach {}", file.display()))?;
                parts.push(ContentPart::Text { text: format!("\n[attached image {name}]") });
                parts.push(ContentPart::image_data(media_type, &data));
            }
            Kind::Pdf => parts.extend(read_pdf(&file, &name, tools).await?),
        }
    }
    Ok(parts)
}

/// The text and images the `pdf` plugin reads from `file`.
async fn read_pdf(
    file: &Path,
    name: &str,
    tools: &ToolRegistry,
) -> anyhow::Result<Vec<ContentPart>> {
    if !tools.specs().iter().any(|t| t.name == READ_PDF) {
        anyhow::bail!(
            "cannot attach {name}: reading a PDF needs the `pdf` plugin (plugins/pdf; `plugins/build.sh` \
             builds it) in the plugins directory"
        );
    }
    let call = ToolCall {
        id: "attach".into(),
        name: READ_PDF.into(),
        arguments: serde_json::json!({ "path": reson::policy::guest_path(file) }).to_string(),
    };
    let result = tools.call(&call, &CallContext::default()).await;
    anyhow::ensure!(result.ok, "cannot attach {name}: {}", result.text);
    let mut parts =
        vec![ContentPart::Text { text: format!("\n[attached PDF {name}]\n{}", result.text) }];
    for image in result.images {
        parts.push(ContentPart::image_data(&image.media_type, &image.data));
    }
    Ok(parts)
}

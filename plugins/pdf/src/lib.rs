//! `pdf`: the `read_pdf` tool. Reads a PDF from the granted directories
//! inside the sandbox, since a PDF parser is exactly the code one should
//! not run with the host's rights: the text of each page, and the images in
//! them (JPEG as it is, 8-bit RGB and grey pixels as PNG) for the model to
//! see. The file is checked before it is parsed ([`guard`]); anything else
//! a hostile file does ends within the plugin's memory and time limits.

mod guard;
mod images;
mod pages;

use lopdf::Document;
use reson_sdk::{Context, Output, ToolError, Toolbox};
use schemars::JsonSchema;
use serde::Deserialize;
use std::path::Path;

/// The largest file read.
const MAX_FILE: u64 = 64 << 20;
/// The most text returned when the call does not say.
const DEFAULT_MAX_BYTES: usize = 200_000;

/// Arguments of `read_pdf`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadPdfArgs {
    /// The PDF: absolute, or relative to the first granted directory.
    path: String,
    /// Pages to read, such as `1-3,7` (from 1); all when unset.
    pages: Option<String>,
    /// Whether to return the images on those pages (default true).
    images: Option<bool>,
    /// The most images returned (default 8, at most 32).
    #[schemars(range(min = 0, max = 32))]
    max_images: Option<u32>,
    /// The most bytes of text returned (default 200000); longer text is
    /// cut, with a last line saying so.
    max_bytes: Option<u32>,
}

fn read_pdf(args: ReadPdfArgs, ctx: &Context) -> Result<Output, ToolError> {
    if args.path.is_empty() {
        return Err(ToolError::invalid("path is empty"));
    }
    let path = ctx.resolve(&args.path);
    let bytes = read(&path)?;
    let shown = path.display();
    guard::check(&bytes).map_err(|why| ToolError::failed(format!("{shown} is refused: {why}")))?;
    let mut document = Document::load_mem(&bytes)
        .map_err(|e| ToolError::failed(format!("{shown} is not a readable PDF: {e}")))?;
    if document.is_encrypted() && document.decrypt("").is_err() {
        return Err(ToolError::failed(format!(
            "{shown} is encrypted with a password; it cannot be read"
        )));
    }
    let all = document.get_pages();
    let wanted =
        pages::select(args.pages.as_deref(), all.len() as u32).map_err(ToolError::invalid)?;
    let max_bytes = args.max_bytes.map_or(DEFAULT_MAX_BYTES, |n| n as usize);
    let mut text = format!("{shown}: {} page{}", all.len(), if all.len() == 1 { "" } else { "s" });
    let mut output_images = Vec::new();
    let max_images = args.max_images.unwrap_or(8).min(32) as usize;
    let mut notes = Vec::new();
    for number in &wanted {
        // The page's content is parsed apart from the file's objects: its
        // nesting is checked on its own.
        let content = all.get(number).and_then(|&id| document.get_page_content(id).ok());
        let page_text = match content.as_deref().map(guard::check) {
            Some(Err(why)) => format!("(this page is not read: {why})"),
            _ => document
                .extract_text(&[*number])
                .unwrap_or_else(|e| format!("(the text of this page could not be read: {e})")),
        };
        text.push_str(&format!("\n\n--- page {number} ---\n{}", page_text.trim()));
        if args.images == Some(false) {
            continue;
        }
        let Some(&id) = all.get(number) else { continue };
        for image in document.get_page_images(id).unwrap_or_default() {
            if output_images.len() >= max_images {
                notes.push(format!("page {number}: more images than max_images ({max_images})"));
                break;
            }
            match images::encode(&image) {
                Ok(encoded) => output_images.push(encoded),
                Err(why) => notes.push(format!("page {number}: an image not shown: {why}")),
            }
        }
    }
    if !output_images.is_empty() {
        text.push_str(&format!("\n\n{} image(s) attached, in page order.", output_images.len()));
    }
    for note in notes {
        text.push_str(&format!("\n{note}"));
    }
    let mut output = Output::text(cap(text, max_bytes));
    for (media_type, data) in output_images {
        output = output.with_image(media_type, data);
    }
    Ok(output)
}

/// Reads the whole file, refusing directories and files over [`MAX_FILE`].
fn read(path: &Path) -> Result<Vec<u8>, ToolError> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| ToolError::failed(format!("{shown}: {e}")))?;
    if meta.is_dir() {
        return Err(ToolError::invalid(format!("{shown} is a directory, not a PDF")));
    }
    if meta.len() > MAX_FILE {
        return Err(ToolError::failed(format!(
            "{shown} is {} MiB; read_pdf reads files up to {} MiB",
            meta.len() >> 20,
            MAX_FILE >> 20
        )));
    }
    std::fs::read(path).map_err(|e| ToolError::failed(format!("{shown}: {e}")))
}

/// `text` cut to `max` bytes (at a character boundary), with a last line
/// saying so.
fn cap(text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n(cut at {max} bytes of {}; read fewer pages at once)", &text[..end], text.len())
}

fn tools() -> Toolbox {
    Toolbox::new().tool(
        "read_pdf",
        "Reads a PDF file: the text of each page (`--- page N ---`), and the images on those \
         pages attached for you to see. `pages` such as `1-3,7` reads some pages only; \
         `images: false` leaves the images out.",
        read_pdf,
    )
}

reson_sdk::export_tools!(tools);

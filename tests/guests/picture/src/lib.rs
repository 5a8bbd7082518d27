//! `picture`: a tool whose result carries images, as a browser's screenshot
//! would: real PNGs (`red`, 2x2; `blue`, 3x1; `noise`, 64x64 and about
//! 12 KB), and the bad kinds a host must refuse: `svg` (not an image type
//! it passes on) and `corrupt` (`image/png` that is no PNG).

use reson_sdk::{Context, Output, ToolError, Toolbox};
use schemars::JsonSchema;
use serde::Deserialize;

const RED: &[u8] = include_bytes!("red.png");
const BLUE: &[u8] = include_bytes!("blue.png");
const NOISE: &[u8] = include_bytes!("noise.png");

/// Arguments of `picture`.
#[derive(Deserialize, JsonSchema)]
struct PictureArgs {
    /// The result's text.
    caption: String,
    /// The images to return, in order: `red`, `blue`, `noise`, `svg` or `corrupt`.
    images: Vec<String>,
}

fn picture(args: PictureArgs, _ctx: &Context) -> Result<Output, ToolError> {
    let mut output = Output::text(args.caption);
    for name in &args.images {
        output = match name.as_str() {
            "red" => output.with_image("image/png", RED.to_vec()),
            "blue" => output.with_image("image/png", BLUE.to_vec()),
            "noise" => output.with_image("image/png", NOISE.to_vec()),
            "svg" => output
                .with_image("image/svg+xml", b"<svg xmlns='http://www.w3.org/2000/svg'/>".to_vec()),
            "corrupt" => output.with_image("image/png", b"this is not a png at all".to_vec()),
            other => return Err(ToolError::invalid(format!("no image called {other:?}"))),
        };
    }
    Ok(output)
}

fn tools() -> Toolbox {
    Toolbox::new().tool("picture", "Returns the caption with the named images.", picture)
}

reson_sdk::export_tools!(tools);

//! The images of a page as the model takes them: a JPEG as it is, 8-bit
//! RGB or grey pixels (raw or zlib-compressed) as a PNG.

use flate2::read::ZlibDecoder;
use lopdf::xobject::PdfImage;
use std::io::Read;

/// The largest side of an image shown.
const MAX_SIDE: i64 = 4096;

/// `image` as (media type, bytes), or why it cannot be shown.
pub fn encode(image: &PdfImage) -> Result<(String, Vec<u8>), String> {
    let (width, height) = (image.width, image.height);
    if width <= 0 || height <= 0 || width > MAX_SIDE || height > MAX_SIDE {
        return Err(format!("{width}×{height} pixels, outside 1 to {MAX_SIDE} a side"));
    }
    let filters: Vec<&str> = image.filters.iter().flatten().map(String::as_str).collect();
    match filters.as_slice() {
        ["DCTDecode"] => return Ok(("image/jpeg".to_owned(), image.content.to_vec())),
        [] | ["FlateDecode"] => {}
        other => return Err(format!("its filters {other:?} are not decoded here")),
    }
    let channels = match image.color_space.as_deref() {
        Some("DeviceRGB") => 3usize,
        Some("DeviceGray") => 1,
        other => return Err(format!("color space {}", other.unwrap_or("none"))),
    };
    if image.bits_per_component != Some(8) {
        return Err(format!("{:?} bits per component", image.bits_per_component));
    }
    let expected = width as usize * height as usize * channels;
    let pixels = if filters.is_empty() {
        image.content.to_vec()
    } else {
        let mut out = Vec::with_capacity(expected);
        ZlibDecoder::new(image.content)
            .take(expected as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|e| format!("its data does not decompress: {e}"))?;
        out
    };
    if pixels.len() != expected {
        return Err(format!(
            "{} bytes of pixels where {width}×{height} needs {expected}",
            pixels.len()
        ));
    }
    let mut png = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut png, width as u32, height as u32);
        encoder.set_color(if channels == 3 {
            png::ColorType::Rgb
        } else {
            png::ColorType::Grayscale
        });
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
        writer.write_image_data(&pixels).map_err(|e| e.to_string())?;
    }
    Ok(("image/png".to_owned(), png))
}

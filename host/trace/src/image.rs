//! Images kept beside the messages that carry them (`messages/000003.png`
//! in the file store), so that a message's JSON, its `message_added` event
//! and every listing of the trace stay small.
//!
//! A writer hands a store images inline, as `data:` URLs in
//! [`ContentPart::ImageUrl`](super::ContentPart::ImageUrl); [`TraceStore::add_message`](super::TraceStore::add_message)
//! keeps the bytes of each PNG, JPEG, GIF or WebP one beside the message
//! and stores the message with a [`ContentPart::Image`](super::ContentPart::Image) naming it. Readers
//! get the bytes back with [`TraceStore::get_image`](super::TraceStore::get_image).
//! Older traces, whose messages hold the `data:` URLs themselves, read as
//! they always did.

use serde::{Deserialize, Serialize};

/// The media types kept and passed on as images, with the file extension
/// each is stored under.
const TYPES: [(&str, &str); 4] =
    [("image/png", "png"), ("image/jpeg", "jpg"), ("image/gif", "gif"), ("image/webp", "webp")];

/// An image stored beside its message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub media_type: String,
    /// Its name in the trace: `{sequence:06}.{ext}`, or
    /// `{sequence:06}-{n}.{ext}` (from 1) when the message has several.
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
}

/// An image's bytes, as a [`TraceSnapshot`](super::TraceSnapshot) carries them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageData {
    /// The name of [`ImageRef::name`].
    pub name: String,
    /// The encoded image.
    pub data: Vec<u8>,
}

/// Why bytes are not an image the host passes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ImageError {
    /// Not one of the four image types.
    #[error(
        "{0:?} is not an image type the host passes on (image/png, image/jpeg, image/gif or image/webp)"
    )]
    UnsupportedType(String),
    /// Over the size limit.
    #[error("the image is {bytes} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// Its size.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// The bytes are not an image of the type they claim.
    #[error("the bytes are not a valid {media_type} image ({reason})")]
    Corrupt {
        /// The type claimed.
        media_type: String,
        /// What is wrong.
        reason: String,
    },
}

/// The media type of the image `data` is, by its first bytes: PNG, JPEG,
/// GIF or WebP; `None` for anything else.
pub fn sniff_image_type(data: &[u8]) -> Option<&'static str> {
    match imagesize::image_type(data).ok()? {
        imagesize::ImageType::Png => Some("image/png"),
        imagesize::ImageType::Jpeg => Some("image/jpeg"),
        imagesize::ImageType::Gif => Some("image/gif"),
        imagesize::ImageType::Webp => Some("image/webp"),
        _ => None,
    }
}

/// Checks that `data` is a `media_type` image of at most `limit` bytes
/// whose header can be read, and returns its width and height.
pub fn check_image(media_type: &str, data: &[u8], limit: u64) -> Result<(u32, u32), ImageError> {
    let Some(ext) = extension(media_type) else {
        return Err(ImageError::UnsupportedType(media_type.to_owned()));
    };
    if data.len() as u64 > limit {
        return Err(ImageError::TooLarge { bytes: data.len() as u64, limit });
    }
    let corrupt =
        |reason: String| ImageError::Corrupt { media_type: media_type.to_owned(), reason };
    let found = imagesize::image_type(data).map_err(|e| corrupt(e.to_string()))?;
    let matches = matches!(
        (ext, found),
        ("png", imagesize::ImageType::Png)
            | ("jpg", imagesize::ImageType::Jpeg)
            | ("gif", imagesize::ImageType::Gif)
            | ("webp", imagesize::ImageType::Webp)
    );
    if !matches {
        return Err(corrupt(format!("the data is {found:?}")));
    }
    let size = imagesize::blob_size(data).map_err(|e| corrupt(e.to_string()))?;
    let dimension = |n: usize| u32::try_from(n).ok().filter(|&n| n > 0);
    match (dimension(size.width), dimension(size.height)) {
        (Some(width), Some(height)) => Ok((width, height)),
        _ => Err(corrupt(format!("its header says {}x{} pixels", size.width, size.height))),
    }
}

/// The media type of a stored image's `name`, when it is a name the
/// stores give images; anything else names no image.
pub fn image_media_type(name: &str) -> Option<&'static str> {
    let (stem, ext) = name.split_once('.')?;
    let (sequence, n) = stem.split_once('-').unwrap_or((stem, "1"));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit());
    if !(sequence.len() >= 6 && digits(sequence) && digits(n)) {
        return None;
    }
    TYPES.iter().find(|(_, e)| *e == ext).map(|(t, _)| *t)
}

pub(crate) fn extension(media_type: &str) -> Option<&'static str> {
    TYPES.iter().find(|(t, _)| t.eq_ignore_ascii_case(media_type)).map(|(_, e)| *e)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A 1x1 PNG.
    pub(crate) const PNG: &[u8] = &[
        0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44,
        0x52, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f,
        0x15, 0xc4, 0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8,
        0xcf, 0xc0, 0xf0, 0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00,
        0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
    ];

    #[test]
    fn images_are_checked_for_type_size_and_header() {
        assert_eq!(check_image("image/png", PNG, 1024), Ok((1, 1)));
        assert!(matches!(
            check_image("image/svg+xml", b"<svg/>", 1024),
            Err(ImageError::UnsupportedType(t)) if t == "image/svg+xml"
        ));
        assert_eq!(
            check_image("image/png", PNG, 10),
            Err(ImageError::TooLarge { bytes: PNG.len() as u64, limit: 10 })
        );
        let err = check_image("image/png", b"not a png at all", 1024).unwrap_err();
        assert!(err.to_string().starts_with("the bytes are not a valid image/png image"), "{err}");
        let err = check_image("image/jpeg", PNG, 1024).unwrap_err();
        assert!(err.to_string().contains("the data is Png"), "{err}");
    }

    #[test]
    fn only_names_the_stores_give_are_images() {
        assert_eq!(image_media_type("000003.png"), Some("image/png"));
        assert_eq!(image_media_type("000003-2.webp"), Some("image/webp"));
        assert_eq!(image_media_type("1234567-10.jpg"), Some("image/jpeg"));
        for bad in ["000003.json", "../000003.png", "3.png", "000003-.png", "000003.png.txt", "x"] {
            assert_eq!(image_media_type(bad), None, "{bad}");
        }
    }
}

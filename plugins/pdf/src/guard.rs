//! Checks made on a PDF's bytes before the parser sees them, so that a
//! hostile file ends in an error that says what is wrong with it rather
//! than in a parser's stack or memory running out: objects nested too
//! deep, and streams that decompress to far more than a document needs.

use flate2::read::ZlibDecoder;
use std::io::Read;

/// The deepest nesting of arrays and dictionaries taken.
pub const MAX_DEPTH: usize = 64;
/// The most one stream may decompress to.
pub const MAX_STREAM: u64 = 32 << 20;
/// The most all streams together may decompress to.
pub const MAX_TOTAL: u64 = 96 << 20;

/// What is wrong with a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hostile {
    /// Arrays and dictionaries nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// A stream decompressing to more than [`MAX_STREAM`].
    StreamTooLarge,
    /// Streams decompressing to more than [`MAX_TOTAL`] together.
    TotalTooLarge,
}

impl std::fmt::Display for Hostile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooDeep => write!(f, "its objects nest deeper than {MAX_DEPTH} levels"),
            Self::StreamTooLarge => write!(
                f,
                "a stream decompresses to more than {} MiB (a decompression bomb?)",
                MAX_STREAM >> 20
            ),
            Self::TotalTooLarge => {
                write!(f, "its streams decompress to more than {} MiB together", MAX_TOTAL >> 20)
            }
        }
    }
}

/// Checks `bytes`: the nesting outside streams, and what each
/// zlib-compressed stream decompresses to (up to the caps, never more).
pub fn check(bytes: &[u8]) -> Result<(), Hostile> {
    let mut depth = 0usize;
    let mut total = 0u64;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => i = skip_line(bytes, i),
            b'(' => i = skip_string(bytes, i),
            b'[' => depth = deeper(depth)?,
            b'<' if bytes.get(i + 1) == Some(&b'<') => {
                depth = deeper(depth)?;
                i += 1;
            }
            b']' => depth = depth.saturating_sub(1),
            b'>' if bytes.get(i + 1) == Some(&b'>') => {
                depth = depth.saturating_sub(1);
                i += 1;
            }
            b's' if bytes[i..].starts_with(b"stream") && !bytes[..i].ends_with(b"end") => {
                let start = data_start(bytes, i + b"stream".len());
                let end = find(bytes, start, b"endstream").unwrap_or(bytes.len());
                total += inflated(&bytes[start..end])?;
                if total > MAX_TOTAL {
                    return Err(Hostile::TotalTooLarge);
                }
                i = end + b"endstream".len();
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

fn deeper(depth: usize) -> Result<usize, Hostile> {
    if depth >= MAX_DEPTH { Err(Hostile::TooDeep) } else { Ok(depth + 1) }
}

/// The index of the line end after `i`.
fn skip_line(bytes: &[u8], i: usize) -> usize {
    bytes[i..].iter().position(|&b| b == b'\n' || b == b'\r').map_or(bytes.len(), |n| i + n)
}

/// The index of the `)` closing the literal string that opens at `i`
/// (nested parentheses balance; a backslash escapes the next byte).
fn skip_string(bytes: &[u8], i: usize) -> usize {
    let mut open = 0usize;
    let mut j = i;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 1,
            b'(' => open += 1,
            b')' => {
                open -= 1;
                if open == 0 {
                    return j;
                }
            }
            _ => {}
        }
        j += 1;
    }
    bytes.len()
}

/// Where a stream's data starts: after the end of line that follows the
/// keyword.
fn data_start(bytes: &[u8], mut i: usize) -> usize {
    if bytes.get(i) == Some(&b'\r') {
        i += 1;
    }
    if bytes.get(i) == Some(&b'\n') {
        i += 1;
    }
    i.min(bytes.len())
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes[from..].windows(needle.len()).position(|w| w == needle).map(|n| from + n)
}

/// How many bytes `data` inflates to if it is zlib data (0 when it is
/// not), reading no further than the cap.
fn inflated(data: &[u8]) -> Result<u64, Hostile> {
    // A zlib header: deflate, and a check value that divides.
    let zlib = data.len() >= 2
        && data[0] & 0x0f == 8
        && (u16::from(data[0]) << 8 | u16::from(data[1])) % 31 == 0;
    if !zlib {
        return Ok(0);
    }
    let mut decoder = ZlibDecoder::new(data).take(MAX_STREAM + 1);
    let mut sink = [0u8; 64 << 10];
    let mut out = 0u64;
    loop {
        match decoder.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => out += n as u64,
        }
    }
    if out > MAX_STREAM { Err(Hostile::StreamTooLarge) } else { Ok(out) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression;
    use flate2::write::ZlibEncoder;
    use std::io::Write;

    fn zlib(data: &[u8]) -> Vec<u8> {
        let mut encoder = ZlibEncoder::new(Vec::new(), Compression::best());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    fn with_stream(data: &[u8]) -> Vec<u8> {
        let mut pdf = b"%PDF-1.7\n1 0 obj << /Length 9 /Filter /FlateDecode >>\nstream\n".to_vec();
        pdf.extend_from_slice(data);
        pdf.extend_from_slice(b"\nendstream\nendobj\n");
        pdf
    }

    #[test]
    fn deep_nesting_is_refused_and_brackets_in_strings_and_comments_are_not_nesting() {
        let deep = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(check(deep.as_bytes()), Err(Hostile::TooDeep));
        let dicts = "<<".repeat(MAX_DEPTH + 1);
        assert_eq!(check(dicts.as_bytes()), Err(Hostile::TooDeep));
        let quoted = format!("({}) % {}\n[[ ]]", "[".repeat(500), "<<".repeat(500));
        assert_eq!(check(quoted.as_bytes()), Ok(()));
        let escaped = format!("(\\) {})", "[".repeat(500));
        assert_eq!(check(escaped.as_bytes()), Ok(()));
    }

    #[test]
    fn a_bomb_is_refused_without_inflating_it_whole() {
        assert_eq!(check(&with_stream(&zlib(&vec![0; 1 << 20]))), Ok(()));
        let bomb = zlib(&vec![0; (MAX_STREAM + 1) as usize]);
        assert_eq!(check(&with_stream(&bomb)), Err(Hostile::StreamTooLarge));
        let part = zlib(&vec![0; (MAX_STREAM - 1) as usize]);
        let many: Vec<u8> = (0..4).flat_map(|_| with_stream(&part)).collect();
        assert_eq!(check(&many), Err(Hostile::TotalTooLarge));
        // Binary stream data with brackets in it is not nesting.
        assert_eq!(check(&with_stream(&[b'['; 500])), Ok(()));
    }
}

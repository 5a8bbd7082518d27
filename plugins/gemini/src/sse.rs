//! An incremental server-sent-events parser. Bytes arrive in reads that may
//! end anywhere (inside a UTF-8 character, between the `\r` and `\n` of a
//! line end), so lines are kept as bytes until they are complete.

use reson_sdk::provider::ProviderError;

/// The parser's state between reads.
#[derive(Debug, Default)]
pub struct SseParser {
    /// The current line, not yet ended.
    line: Vec<u8>,
    /// The last byte ended a line with `\r`; a `\n` right after belongs to it.
    after_cr: bool,
    /// The `data` of the event being read, lines joined with `\n`.
    data: String,
    /// Whether the event being read has a `data` field (which may be empty).
    has_data: bool,
}

impl SseParser {
    /// Feeds the next bytes, adding the data of each event they complete to
    /// `events`. A line that is not UTF-8 is an error, but the events
    /// completed before it are still added: the error must not depend on
    /// where the reads happened to split the stream.
    pub fn push(&mut self, bytes: &[u8], events: &mut Vec<String>) -> Result<(), ProviderError> {
        for &byte in bytes {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match byte {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    self.end_line(events)?;
                }
                _ => self.line.push(byte),
            }
        }
        Ok(())
    }

    /// Checks the end of the stream: an event still open there was cut off
    /// in transit, a network error retried like any broken connection.
    pub fn finish(&self) -> Result<(), ProviderError> {
        if self.line.is_empty() && !self.has_data {
            Ok(())
        } else {
            let pending = self.data.len() + self.line.len();
            Err(ProviderError::Network(format!(
                "the Gemini stream ended in the middle of an event ({pending} bytes after the \
                 last complete event)"
            )))
        }
    }

    fn end_line(&mut self, events: &mut Vec<String>) -> Result<(), ProviderError> {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if std::mem::take(&mut self.has_data) {
                events.push(std::mem::take(&mut self.data));
            }
            return Ok(());
        }
        let line = String::from_utf8(line).map_err(|_| {
            ProviderError::InvalidResponse("the Gemini stream is not valid UTF-8".to_owned())
        })?;
        let (field, value) = line.split_once(':').unwrap_or((&line, ""));
        // Only `data` matters to Gemini's streams; `event`, `id`, `retry`
        // and comments (an empty field name) are skipped.
        if field == "data" {
            let value = value.strip_prefix(' ').unwrap_or(value);
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(value);
            self.has_data = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_all(chunks: &[&[u8]]) -> Result<Vec<String>, ProviderError> {
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        for chunk in chunks {
            parser.push(chunk, &mut events)?;
        }
        parser.finish()?;
        Ok(events)
    }

    #[test]
    fn events_end_at_blank_lines_with_any_line_ending() {
        let stream =
            b"data: {\"a\":1}\r\n\r\ndata:{\"b\":2}\n\n: keep-alive\n\ndata: x\r\rdata: \n\n";
        assert_eq!(parse_all(&[stream]).unwrap(), [r#"{"a":1}"#, r#"{"b":2}"#, "x", ""]);
    }

    #[test]
    fn multi_line_data_is_joined_and_other_fields_ignored() {
        let stream = b"event: message\nid: 7\nretry: 10\ndata: one\ndata:  two\ndata\n\n";
        assert_eq!(parse_all(&[stream]).unwrap(), ["one\n two\n"]);
    }

    #[test]
    fn any_split_of_the_bytes_gives_the_same_events() {
        let stream = "data: {\"text\":\"héllo ✓ 🦀\"}\r\n\r\ndata: {\"n\":2}\r\n\r\n".as_bytes();
        let whole = parse_all(&[stream]).unwrap();
        assert_eq!(whole.len(), 2);
        for i in 0..=stream.len() {
            for j in i..=stream.len() {
                let parts = [&stream[..i], &stream[i..j], &stream[j..]];
                assert_eq!(parse_all(&parts).unwrap(), whole, "split at {i}, {j}");
            }
        }
        // And one byte per read.
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse_all(&bytes).unwrap(), whole);
    }

    #[test]
    fn an_event_open_at_the_end_is_an_error() {
        let err = parse_all(&[b"data: {\"a\":1}\r\n\r\ndata: {\"cand"]).unwrap_err();
        assert!(matches!(err, ProviderError::Network(m) if m.contains("middle of an event")));
        // Complete data without its blank line is still an open event.
        assert!(parse_all(&[b"data: {}\n"]).is_err());
        assert!(parse_all(&[b""]).unwrap().is_empty());
        assert!(parse_all(&[b": comment only\n"]).unwrap().is_empty());
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let err = parse_all(&[b"data: \xff\xfe\n\n"]).unwrap_err();
        assert!(matches!(err, ProviderError::InvalidResponse(m) if m.contains("UTF-8")));
    }
}

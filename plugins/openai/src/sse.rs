//! An incremental server-sent events decoder (the `text/event-stream`
//! format of the HTML standard), reduced to what Chat Completions streams
//! need: the `data` of each event.
//!
//! Bytes arrive in reads of any size, so a line, a `\r\n` pair or a UTF-8
//! character may be split between two reads. The decoder works on bytes and
//! splits only at the ASCII line ends, so a split character is rejoined
//! before anyone decodes it.

/// Decodes a stream of bytes into event data.
#[derive(Debug, Default)]
pub struct Decoder {
    /// The current line, not yet ended.
    line: Vec<u8>,
    /// The `data` lines of the current event, joined by `\n`.
    data: Vec<u8>,
    /// Whether the current event has had a `data` field.
    has_data: bool,
    /// The last byte was a `\r`, so a `\n` right after it ends nothing.
    after_cr: bool,
}

impl Decoder {
    /// Feeds `bytes`, appending the data of each event they complete to
    /// `events`.
    pub fn feed(&mut self, bytes: &[u8], events: &mut Vec<Vec<u8>>) {
        // An empty read must not forget a pending `\r`.
        if bytes.is_empty() {
            return;
        }
        let mut rest = bytes;
        if self.after_cr && rest.first() == Some(&b'\n') {
            rest = &rest[1..];
        }
        self.after_cr = false;
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.line.extend_from_slice(&rest[..end]);
            self.end_line(events);
            let crlf = rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n');
            if rest[end] == b'\r' && end + 1 == rest.len() {
                self.after_cr = true;
            }
            rest = &rest[end + if crlf { 2 } else { 1 }..];
        }
        self.line.extend_from_slice(rest);
    }

    /// Ends the stream: a last line or event that the server did not end
    /// with a blank line still counts, since its content is complete (a
    /// JSON chunk cut short fails to parse later instead).
    pub fn finish(&mut self, events: &mut Vec<Vec<u8>>) {
        if !self.line.is_empty() {
            self.end_line(events);
        }
        self.dispatch(events);
    }

    fn end_line(&mut self, events: &mut Vec<Vec<u8>>) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        // A line starting with `:` is a comment, which servers send as
        // keep-alives (OpenRouter's ": OPENROUTER PROCESSING").
        if line[0] == b':' {
            return;
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &[][..]),
        };
        // `event`, `id` and `retry` carry nothing a chat stream needs.
        if field == b"data" {
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
    }

    fn dispatch(&mut self, events: &mut Vec<Vec<u8>>) {
        if std::mem::take(&mut self.has_data) {
            events.push(std::mem::take(&mut self.data));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(pieces: &[&[u8]]) -> Vec<String> {
        let mut decoder = Decoder::default();
        let mut events = Vec::new();
        for piece in pieces {
            decoder.feed(piece, &mut events);
        }
        decoder.finish(&mut events);
        events.into_iter().map(|e| String::from_utf8(e).unwrap()).collect()
    }

    #[test]
    fn events_end_at_blank_lines_with_any_line_ending() {
        let lf = decode(&[b"data: {\"a\":1}\n\ndata: [DONE]\n\n"]);
        assert_eq!(lf, [r#"{"a":1}"#, "[DONE]"]);
        assert_eq!(decode(&[b"data: {\"a\":1}\r\n\r\ndata: [DONE]\r\n\r\n"]), lf);
        assert_eq!(decode(&[b"data: {\"a\":1}\r\rdata: [DONE]\r\r"]), lf);
    }

    #[test]
    fn comments_other_fields_and_multi_line_data_follow_the_standard() {
        let events = decode(&[
            b": OPENROUTER PROCESSING\n\nevent: message\nid: 7\nretry: 100\ndata:no space\n\n",
            b"data: first\ndata:  second\n\ndata\n\nid: only\n\n",
        ]);
        assert_eq!(events, ["no space", "first\n second", ""]);
    }

    #[test]
    fn a_split_anywhere_decodes_the_same() {
        let stream = "data: {\"t\":\"héllo 🌍\"}\r\n\r\n: ping\r\ndata: [DONE]\r\n\r\n";
        let stream = stream.as_bytes();
        let whole = decode(&[stream]);
        assert_eq!(whole, ["{\"t\":\"héllo 🌍\"}", "[DONE]"]);
        for cut in 0..=stream.len() {
            assert_eq!(decode(&[&stream[..cut], &stream[cut..]]), whole, "cut at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).flat_map(|b| [b, &b""[..]]).collect();
        assert_eq!(decode(&bytes), whole);
    }

    #[test]
    fn an_unterminated_last_event_is_kept_at_the_end() {
        assert_eq!(decode(&[b"data: [DONE]"]), ["[DONE]"]);
        assert_eq!(decode(&[b"data: [DONE]\n"]), ["[DONE]"]);
        assert_eq!(decode(&[b"data: {\"cut"]), ["{\"cut"]);
        assert!(decode(&[b"", b": just a comment"]).is_empty());
    }
}

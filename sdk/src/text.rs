//! Text from elsewhere, labelled for the model.

/// `text` a page or another party chose (a title, a URL, a search
/// snippet), labelled for the model as the host labels page content:
/// `⟦untrusted WHAT: text⟧`, or with the text on lines of its own between
/// the marks when it has several.
/// The host hands out no page text that holds a mark (`⟦`, `⟧` or a
/// look-alike); they are escaped here too, so that whatever the text, it
/// cannot close its label and speak as the plugin. `what` is the plugin's
/// own words.
pub fn untrusted(what: &str, text: &str) -> String {
    let mut body = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '\u{27e6}' | '\u{27e7}' | '\u{301a}' | '\u{301b}') {
            body.extend(c.escape_unicode());
        } else {
            body.push(c);
        }
    }
    if body.contains('\n') {
        format!("\u{27e6}untrusted {what}:\n{body}\n\u{27e7}")
    } else {
        format!("\u{27e6}untrusted {what}: {body}\u{27e7}")
    }
}

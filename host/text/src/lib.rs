//! # reson-text
//!
//! What the host writes out: [`redact`], the one redaction point every
//! secret value is registered with and every string leaving the host passes
//! through, and [`text`], text from guests and models made safe to show.
//!
//! It depends on nothing of Reson's: every other crate may use it. It must
//! never log, store or send what it is given.

pub mod redact;
pub mod text;

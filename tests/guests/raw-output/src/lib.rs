//! `raw-output`: one tool, `output`, whose answer crosses the WIT boundary
//! exactly as its caller dictates, so that the fuzz target `guest_output`
//! can drive what the host must lift: any discriminant, any pointer, any
//! length, strings that are not UTF-8, lists as long as memory, traps.
//!
//! The exports are written by hand against the canonical ABI, with no
//! bindings in between: bindings only ever produce well-formed answers.
//! wit-bindgen is used for the component type alone (the world the module
//! is wrapped into).
//!
//! The call's arguments are `{"p":"HEX"}`; the payload's first byte picks
//! the mode:
//! - 0: the next 36 bytes are the return area of
//!   `result<tool-output, tool-error>` and the rest is the heap it points
//!   into: the pointers in the area (and in each `image` the area's list
//!   points at) are offsets into the payload, which the guest turns into
//!   addresses so that most of them land in memory;
//! - 1: the next 4 bytes are the address of the return area itself;
//! - 2: a trap.

wit_bindgen::generate!({
    path: "../../../wit",
    world: "reson:plugin/tool-plugin@0.1.0",
});

use std::alloc::{Layout, alloc};

/// Size of the return area of `result<tool-output, tool-error>`.
const AREA: usize = 36;
/// Size of one `image` record: a string and a `list<u8>`.
const IMAGE: usize = 16;

/// Leaks `bytes` at a 4-aligned address: the host reads the answer after
/// the call returns, and a fuzzing run is short.
fn leak(bytes: &[u8]) -> *mut u8 {
    let layout = Layout::from_size_align(bytes.len().max(1), 4).expect("a small layout");
    // SAFETY: the layout has a non-zero size; the copy stays within it.
    unsafe {
        let p = alloc(layout);
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), p, bytes.len());
        p
    }
}

fn word(bytes: &[u8], at: usize) -> u32 {
    bytes.get(at..at + 4).map_or(0, |b| u32::from_le_bytes(b.try_into().expect("four bytes")))
}

fn relocate(bytes: &mut [u8], at: usize, base: u32) {
    if let Some(field) = bytes.get_mut(at..at + 4) {
        let moved = u32::from_le_bytes((&*field).try_into().expect("four bytes")).wrapping_add(base);
        field.copy_from_slice(&moved.to_le_bytes());
    }
}

fn hex(text: &[u8]) -> Vec<u8> {
    let digit = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
    text.chunks(2).map(|pair| digit(pair[0]) << 4 | pair.get(1).map_or(0, |&c| digit(c))).collect()
}

/// The tool list: one tool taking any object.
///
/// # Safety
/// Called by the host through the canonical ABI.
#[unsafe(export_name = "reson:plugin/tool@0.1.0#list")]
pub unsafe extern "C" fn list() -> *mut u8 {
    let strings: [&'static str; 3] = [
        "output",
        "Answers with the bytes it is sent, as the canonical ABI lays them out.",
        r#"{"type":"object","properties":{"p":{"type":"string"}},"required":["p"]}"#,
    ];
    let mut spec = Vec::with_capacity(24);
    for s in strings {
        spec.extend_from_slice(&(s.as_ptr() as u32).to_le_bytes());
        spec.extend_from_slice(&(s.len() as u32).to_le_bytes());
    }
    let specs = leak(&spec) as u32;
    let mut area = specs.to_le_bytes().to_vec();
    area.extend_from_slice(&1u32.to_le_bytes());
    leak(&area)
}

/// Frees nothing: everything handed out was leaked on purpose.
///
/// # Safety
/// Called by the host through the canonical ABI.
#[unsafe(export_name = "cabi_post_reson:plugin/tool@0.1.0#list")]
pub unsafe extern "C" fn list_post(_area: *mut u8) {}

/// The call: see the crate's documentation for the payload.
///
/// # Safety
/// Called by the host through the canonical ABI, with valid strings.
#[unsafe(export_name = "reson:plugin/tool@0.1.0#call")]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn call(
    _name: *const u8,
    _name_len: usize,
    args: *const u8,
    args_len: usize,
    _call_id: *const u8,
    _call_id_len: usize,
    _trace_some: u32,
    _trace: *const u8,
    _trace_len: usize,
    _cwd_some: u32,
    _cwd: *const u8,
    _cwd_len: usize,
) -> *mut u8 {
    // SAFETY: the host passes the arguments as a valid string.
    let args = unsafe { std::slice::from_raw_parts(args, args_len) };
    let digits = args.strip_prefix(br#"{"p":""#).and_then(|a| a.strip_suffix(br#""}"#));
    let payload = hex(digits.unwrap_or_default());
    match payload.split_first() {
        Some((1, rest)) => word(rest, 0) as *mut u8,
        Some((2, _)) => std::process::abort(),
        Some((_, rest)) => {
            let mut area = [0u8; AREA];
            let n = rest.len().min(AREA);
            area[..n].copy_from_slice(&rest[..n]);
            let heap_at = leak(&rest[n..]);
            let base = heap_at as u32;
            // SAFETY: `leak` copied exactly this many bytes there.
            let heap = unsafe { std::slice::from_raw_parts_mut(heap_at, rest.len() - n) };
            match area[0] {
                0 => {
                    let (first, count) = (word(&area, 28) as usize, word(&area, 32) as usize);
                    for i in 0..count.min(heap.len() / IMAGE) {
                        let at = first.saturating_add(i * IMAGE);
                        relocate(heap, at, base);
                        relocate(heap, at.saturating_add(8), base);
                    }
                    for at in [4, 16, 28] {
                        relocate(&mut area, at, base);
                    }
                }
                1 => relocate(&mut area, 8, base),
                _ => {}
            }
            leak(&area)
        }
        None => std::ptr::null_mut(),
    }
}

/// Frees nothing: everything handed out was leaked on purpose.
///
/// # Safety
/// Called by the host through the canonical ABI.
#[unsafe(export_name = "cabi_post_reson:plugin/tool@0.1.0#call")]
pub unsafe extern "C" fn call_post(_area: *mut u8) {}

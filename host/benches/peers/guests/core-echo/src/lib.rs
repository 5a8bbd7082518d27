//! `echo` as a bare core module: the JSON echo of plugins/echo (parse
//! `{"text": …}`, return the text) over linear memory, with no SDK. The
//! host asks for `alloc(len)`, writes the arguments there and calls
//! `echo(ptr, len)`, which takes ownership of them and returns the text's
//! `ptr << 32 | len` (0 when the arguments do not parse); the host reads
//! the text and hands it back with `dealloc(ptr, len)`.

use serde::Deserialize;

/// Arguments of `echo`, as in plugins/echo.
#[derive(Deserialize)]
struct EchoArgs {
    text: String,
}

/// A buffer of `len` bytes for the host to write into.
#[unsafe(no_mangle)]
pub extern "C" fn alloc(len: u32) -> *mut u8 {
    let mut buf = Vec::<u8>::with_capacity(len as usize);
    let ptr = buf.as_mut_ptr();
    std::mem::forget(buf);
    ptr
}

/// Frees a buffer from [`alloc`] or [`echo`].
///
/// # Safety
/// `ptr` and `len` must be one buffer this module handed out, freed once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dealloc(ptr: *mut u8, len: u32) {
    // SAFETY: the caller passes back a buffer of exactly `len` bytes
    // capacity that `alloc` or `echo` leaked.
    drop(unsafe { Vec::from_raw_parts(ptr, 0, len as usize) });
}

/// Returns the `text` of the JSON object in the `len` bytes at `ptr`.
///
/// # Safety
/// `ptr` must come from `alloc(len)` with `len` bytes written; `echo`
/// takes ownership of it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn echo(ptr: *mut u8, len: u32) -> u64 {
    // SAFETY: `ptr` is an `alloc(len)` buffer the host filled.
    let args = unsafe { Vec::from_raw_parts(ptr, len as usize, len as usize) };
    let Ok(args) = serde_json::from_slice::<EchoArgs>(&args) else {
        return 0;
    };
    let text = args.text.into_bytes().into_boxed_slice();
    let len = text.len() as u64;
    let ptr = Box::into_raw(text) as *mut u8 as u64;
    ptr << 32 | len
}

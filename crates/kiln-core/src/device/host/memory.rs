//! Host memory: uploads, zero-filled placeholders, copies and reads.

use crate::alloc::SLACK_BYTES;
use crate::error::Result;
use crate::registry::Buffer;
use crate::ty::VarType;

/// A fresh buffer holding `bytes` (little-endian elements of `ty`).
pub(in crate::device) fn upload(ty: VarType, bytes: &[u8]) -> Result<Buffer> {
    let len = bytes.len() / ty.size_bytes();
    let buf = Buffer::new(ty, len, &|| format!("an array of {len} × {ty}"))?;
    // SAFETY: buf has room for len elements = bytes.len() bytes; regions do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), buf.ptr(), bytes.len()) };
    clear_slack(&buf);
    Ok(buf)
}

fn clear_slack(buf: &Buffer) {
    // SAFETY: every buffer has SLACK_BYTES writable bytes after its elements.
    unsafe { std::ptr::write_bytes(buf.ptr().add(buf.bytes()), 0, SLACK_BYTES) };
}

/// A zero-filled buffer that stands in for the result of a request refused while a symbolic body
/// is traced (never read for real: the trace is thrown away). Not a device op: nothing records it.
pub(in crate::device) fn placeholder_zeros(ty: VarType, len: usize) -> Result<Buffer> {
    let buf = Buffer::new(ty, len, &|| format!("a placeholder of {len} × {ty}"))?;
    // SAFETY: the buffer holds bytes() + SLACK_BYTES writable bytes.
    unsafe { std::ptr::write_bytes(buf.ptr(), 0, buf.bytes() + SLACK_BYTES) };
    Ok(buf)
}

/// A copy of `src` in a new buffer.
pub(in crate::device) fn copy_buffer(src: &Buffer) -> Result<Buffer> {
    let buf = Buffer::new(src.ty(), src.len, &|| {
        format!("a copy of an array of {} × {}", src.len, src.ty())
    })?;
    // SAFETY: both hold src.bytes() bytes; distinct allocations.
    unsafe { std::ptr::copy_nonoverlapping(src.ptr(), buf.ptr(), src.bytes()) };
    Ok(buf)
}

/// The buffer's contents as bytes.
pub(in crate::device) fn read(buf: &Buffer) -> Vec<u8> {
    buf.to_bytes()
}

/// A new buffer of `len` elements written from `values` in one pass (no staging copy): for host
/// data that is not contiguous, such as a strided or transposed ndarray view. Fewer values than
/// `len` is an error; extra ones are ignored.
pub(in crate::device) fn upload_iter<T: crate::ty::Scalar>(
    len: usize,
    values: impl IntoIterator<Item = T>,
) -> Result<Buffer> {
    let ty = T::TYPE;
    let w = ty.size_bytes();
    let buf = Buffer::new(ty, len, &|| format!("an array of {len} × {ty}"))?;
    let mut written = 0usize;
    for v in values.into_iter().take(len) {
        let b = v.to_bits64().to_le_bytes();
        // SAFETY: written < len, so bytes [written·w, written·w + w) lie inside the buffer's
        // len·w bytes; the source is a local array of 8 ≥ w bytes.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), buf.ptr().add(written * w), w) };
        written += 1;
    }
    if written < len {
        return Err(crate::Error::Invalid(format!(
            "upload: {written} values given for an array of {len}"
        )));
    }
    clear_slack(&buf);
    Ok(buf)
}

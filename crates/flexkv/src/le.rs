//! Little-endian fields in byte buffers: the only way flexkv puts integers on disk.
//!
//! Callers index within buffers whose size they have checked (a whole page or block, or a
//! length covered by a checksum), so an out-of-range offset is a bug and panics.

/// Writes `v` at `buf[at..at + 8]`.
pub(crate) fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    buf[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

/// Writes `v` at `buf[at..at + 4]`.
pub(crate) fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Reads the `u64` at `buf[at..at + 8]`.
pub(crate) fn get_u64(buf: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    u64::from_le_bytes(b)
}

/// Reads the `u32` at `buf[at..at + 4]`.
pub(crate) fn get_u32(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

/// Appends `v` to `out`, little-endian.
pub(crate) fn push_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` to `out`, little-endian.
pub(crate) fn push_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Appends `v` to `out`, little-endian.
pub(crate) fn push_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// The little-endian `u16` at `at` in `buf`. Panics if `buf` is too short: callers check
/// lengths first.
pub(crate) fn get_u16(buf: &[u8], at: usize) -> u16 {
    let mut b = [0; 2];
    b.copy_from_slice(&buf[at..at + 2]);
    u16::from_le_bytes(b)
}

/// Appends `v` as a base-128 varint (7 bits per byte, low first, high bit = more).
pub(crate) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Reads a base-128 varint at `*at`, advancing it.
#[inline]
pub(crate) fn get_varint(buf: &[u8], at: &mut usize) -> Result<u64, &'static str> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*at).ok_or("varint cut short")?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint longer than 10 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_round_trip_in_little_endian_order() {
        let mut buf = [0u8; 16];
        put_u64(&mut buf, 0, 0x0102_0304_0506_0708);
        put_u32(&mut buf, 8, 0x0A0B_0C0D);
        assert_eq!(buf[..8], [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(buf[8..12], [0x0D, 0x0C, 0x0B, 0x0A]);
        assert_eq!(get_u64(&buf, 0), 0x0102_0304_0506_0708);
        assert_eq!(get_u32(&buf, 8), 0x0A0B_0C0D);
    }
}

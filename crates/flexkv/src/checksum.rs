//! CRC-32C (Castagnoli), the checksum of every file flexkv writes: the `crc32c` crate's
//! values, computed faster for the short inputs most of them are.
//!
//! The crate checks a buffer in three parts: a byte at a time up to an 8-byte
//! boundary, eight bytes at a time, and a byte at a time after the last boundary.
//! A record of a 16-byte key and a 100-byte value (about 130 bytes) spends a third
//! of its steps on the two byte-wise ends, and each step waits on the one before.
//! Below [`SHORT`] bytes this module reads eight bytes at a time wherever the buffer
//! starts (x86-64 loads need no alignment) and ends with one step each of four, two
//! and one byte, as needed. On this project's machine that took 15 ns for 130 bytes
//! against the crate's 26 ns, and 4 ns for 16 bytes against 10–12 ns (a loop over a
//! million buffers at scattered offsets; docs/benchmarks.md, the forty-seventh
//! session). From [`SHORT`] bytes on, the crate's three interleaved streams are
//! faster and it is used as it is.
//!
//! The values are the crate's for every input (the format does not change); the tests
//! compare the two at every length up to past [`SHORT`] and every alignment.

#![allow(unsafe_code)]

/// Inputs shorter than this take the short path (where the crate starts
/// interleaving three streams: 3 × 256 bytes).
const SHORT: usize = 768;

/// The CRC-32C of `bytes`.
#[inline]
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    crc32c_append(0, bytes)
}

/// The CRC-32C of the bytes `crc` was computed over followed by `bytes`.
#[inline]
pub(crate) fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if bytes.len() < SHORT && std::arch::is_x86_feature_detected!("sse4.2") {
            // SAFETY: the processor has SSE 4.2, checked just above.
            return unsafe { short(crc, bytes) };
        }
    }
    crc32c::crc32c_append(crc, bytes)
}

/// [`crc32c_append`] with the processor's CRC-32C instruction, eight bytes a step.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn short(crc: u32, bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let (words, mut rest) = bytes.as_chunks::<8>();
    let mut c = u64::from(!crc);
    for w in words {
        c = _mm_crc32_u64(c, u64::from_le_bytes(*w));
    }
    // The instruction leaves the upper half zero.
    let mut c = c as u32;
    if let Some((w, r)) = rest.split_first_chunk::<4>() {
        c = _mm_crc32_u32(c, u32::from_le_bytes(*w));
        rest = r;
    }
    if let Some((w, r)) = rest.split_first_chunk::<2>() {
        c = _mm_crc32_u16(c, u16::from_le_bytes(*w));
        rest = r;
    }
    if let Some(&b) = rest.first() {
        c = _mm_crc32_u8(c, b);
    }
    !c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that do not repeat within any length tested.
    fn bytes(n: usize) -> Vec<u8> {
        (0..n as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    #[test]
    fn every_length_and_alignment_gives_the_crates_value() {
        let data = bytes(2 * SHORT + 64);
        for len in 0..2 * SHORT {
            for off in 0..8 {
                let b = &data[off..off + len];
                assert_eq!(crc32c(b), crc32c::crc32c(b), "length {len} at offset {off}");
            }
        }
    }

    #[test]
    fn appending_gives_the_crates_value_and_the_whole_buffers() {
        let data = bytes(1000);
        for split in [0, 1, 3, 7, 8, 9, 100, 767, 768, 999, 1000] {
            let (a, b) = data.split_at(split);
            for seed in [0, 1, 0xdead_beef, u32::MAX] {
                assert_eq!(
                    crc32c_append(seed, b),
                    crc32c::crc32c_append(seed, b),
                    "seed {seed:#x}, {} bytes",
                    b.len()
                );
            }
            assert_eq!(crc32c_append(crc32c(a), b), crc32c::crc32c(&data));
        }
    }

    #[test]
    fn known_values() {
        // The check value of CRC-32C, and the RFC 3720 (iSCSI) test vectors.
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(&[0; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xff; 32]), 0x62a8_ab43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46dd_794e);
    }
}

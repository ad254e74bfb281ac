//! Checking and copying a value that is likely in memory but not in the CPU's caches: a
//! value read through a mapping of the value log, at a random place in a segment.
//!
//! The CPU's own prefetchers follow a sequential read only within a 4 KiB page, so
//! each page of such a value starts with a wait on memory, and one thread checks
//! values that way at about a third of the speed it checks one long sequential run.
//! Here the checksum (or copy) goes [`STEP`] bytes at a time and, before each step,
//! asks for the bytes [`AHEAD`] of it into the second-level cache. Measured on this
//! project's 2-core VM (one thread, 16 KiB records at random places in a 256 MiB file
//! in the page cache, mapped): plain CRC-32C checked 6.1–6.6 GB/s, a third of one
//! sequential pass over the same mapping (18.5–21 GB/s); with these hints about 1.5×
//! that; with hints into the first-level cache 2 KiB ahead, about 1.25×
//! (docs/benchmarks.md, the thirtieth session).

use crate::prefetch::prefetch;

/// The checksum works through this many bytes between hints (a multiple of the 768
/// bytes `crc32c` checksums in three streams at once)...
const STEP: usize = 3072;
/// ...each hint this far ahead of it.
const AHEAD: usize = 4096;

/// [`crate::checksum::crc32c_append`], with the bytes ahead asked for from memory
/// while the checksum works (for values of a few KiB and more).
pub(crate) fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    let mut crc = crc;
    in_steps(bytes, |step| {
        crc = crate::checksum::crc32c_append(crc, step)
    });
    crc
}

/// `bytes.to_vec()`, with the bytes ahead asked for from memory while it copies.
pub(crate) fn to_vec(bytes: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(bytes.len());
    in_steps(bytes, |step| v.extend_from_slice(step));
    v
}

/// Hands `bytes` to `f` in order, [`STEP`] bytes at a time each with a hint
/// [`AHEAD`] of it (short values in one piece, with none).
fn in_steps(bytes: &[u8], mut f: impl FnMut(&[u8])) {
    if bytes.len() <= STEP {
        return f(bytes);
    }
    prefetch(&bytes[..AHEAD.min(bytes.len())]);
    // Steps after the first start on an 8-byte boundary, where `crc32c` takes whole
    // words from the first byte.
    let mut end = STEP + bytes.as_ptr().align_offset(8);
    let mut at = 0;
    while at < bytes.len() {
        end = end.min(bytes.len());
        if let Some(ahead) = bytes.get(at + AHEAD..(end + AHEAD).min(bytes.len())) {
            prefetch(ahead);
        }
        f(&bytes[at..end]);
        at = end;
        end = at + STEP;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checksum_and_the_copy_are_the_plain_ones_at_every_length() {
        let bytes: Vec<u8> = (0..20_000u32).map(|i| (i * 31 + i / 7) as u8).collect();
        for len in [0, 1, 63, 2048, 2049, 4096, 5000, 16_384, 19_999] {
            for init in [0, 0xdead_beef] {
                let b = &bytes[1..1 + len];
                assert_eq!(to_vec(b), b, "{len} bytes");
                assert_eq!(
                    crc32c_append(init, b),
                    crate::checksum::crc32c_append(init, b),
                    "{len} bytes from {init:#x}"
                );
            }
        }
    }
}

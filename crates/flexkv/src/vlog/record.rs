//! The value-log record and the pointer to it (byte layout in `docs/format.md`).
//!
//! A record is a 28-byte header, the key, then the value. The header carries its own
//! CRC-32C, so a torn or garbled length is caught before it drives a read; the payload
//! (key and value) has a second CRC-32C, which the [`Pointer`] repeats, so a read
//! through a pointer also proves it found the record the pointer was made for.

use crate::le::{get_u32, get_u64, push_u32, push_u64};
use crate::memtable::KeyspaceId;

/// Bytes before the key in a record.
pub(crate) const HEADER_LEN: usize = 28;

/// Where a separated value lives: a record in a value-log segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pointer {
    /// The segment file's number.
    pub segment: u32,
    /// The record's first byte in the segment.
    pub offset: u64,
    /// The value's length in bytes.
    pub len: u32,
    /// The record's payload CRC-32C (key and value), checked on every read.
    pub check: u32,
}

impl Pointer {
    /// Bytes of an encoded pointer.
    pub(crate) const ENCODED_LEN: usize = 20;

    /// The record's total length, given the length of its key.
    pub(crate) fn record_len(&self, key_len: usize) -> u64 {
        (HEADER_LEN + key_len) as u64 + u64::from(self.len)
    }

    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        push_u32(out, self.segment);
        push_u64(out, self.offset);
        push_u32(out, self.len);
        push_u32(out, self.check);
    }

    /// Decodes a pointer from the first [`Pointer::ENCODED_LEN`] bytes of `b`.
    pub(crate) fn decode(b: &[u8]) -> Option<Pointer> {
        let b = b.get(..Self::ENCODED_LEN)?;
        Some(Pointer {
            segment: get_u32(b, 0),
            offset: get_u64(b, 4),
            len: get_u32(b, 12),
            check: get_u32(b, 16),
        })
    }
}

/// A decoded record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) key_len: u32,
    pub(crate) value_len: u32,
    pub(crate) seq: u64,
    pub(crate) payload_crc: u32,
    pub(crate) ks: KeyspaceId,
}

impl Header {
    pub(crate) fn record_len(&self) -> u64 {
        HEADER_LEN as u64 + u64::from(self.key_len) + u64::from(self.value_len)
    }

    /// Decodes and checks a header; `Err` says why the bytes are not one.
    pub(crate) fn decode(b: &[u8]) -> Result<Header, &'static str> {
        let b = b.get(..HEADER_LEN).ok_or("truncated record header")?;
        if crate::checksum::crc32c(&b[4..]) != get_u32(b, 0) {
            return Err("record header checksum mismatch");
        }
        Ok(Header {
            key_len: get_u32(b, 4),
            value_len: get_u32(b, 8),
            seq: get_u64(b, 12),
            payload_crc: get_u32(b, 20),
            ks: get_u32(b, 24),
        })
    }
}

/// Appends the record for `(ks, key, seq, value)` to `out`; returns its payload CRC.
#[cfg(test)]
pub(crate) fn encode(out: &mut Vec<u8>, ks: KeyspaceId, key: &[u8], seq: u64, value: &[u8]) -> u32 {
    let payload_crc = encode_head(out, ks, key, seq, value);
    out.extend_from_slice(value);
    payload_crc
}

/// Appends all of the record for `(ks, key, seq, value)` but the value (its header and
/// key) to `out`; returns its payload CRC, which covers the value too. The value's
/// bytes must follow in the file: the value log writes them from where the caller
/// holds them, not through a copy in `out`.
pub(crate) fn encode_head(
    out: &mut Vec<u8>,
    ks: KeyspaceId,
    key: &[u8],
    seq: u64,
    value: &[u8],
) -> u32 {
    let payload_crc = crate::checksum::crc32c_append(crate::checksum::crc32c(key), value);
    let start = out.len();
    push_u32(out, 0);
    push_u32(out, len_u32(key.len()));
    push_u32(out, len_u32(value.len()));
    push_u64(out, seq);
    push_u32(out, payload_crc);
    push_u32(out, ks);
    let crc = crate::checksum::crc32c(&out[start + 4..]);
    out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(key);
    payload_crc
}

/// Lengths were checked against the limits (far below 4 GiB) before encoding.
fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or_else(|_| panic!("length {n} passed the limits unchecked"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_every_flipped_header_byte_is_caught() {
        let mut buf = Vec::new();
        let crc = encode(&mut buf, 3, b"key", 77, b"value");
        let h = Header::decode(&buf).unwrap();
        assert_eq!(
            h,
            Header {
                key_len: 3,
                value_len: 5,
                seq: 77,
                payload_crc: crc,
                ks: 3
            }
        );
        assert_eq!(h.record_len() as usize, buf.len());
        for i in 0..HEADER_LEN {
            let mut bad = buf.clone();
            bad[i] ^= 0x10;
            assert!(Header::decode(&bad).is_err(), "flip at {i} not caught");
        }
        assert!(Header::decode(&buf[..HEADER_LEN - 1]).is_err());
    }

    proptest::proptest! {
        /// Any bytes decode to a header or an error, never a panic.
        #[test]
        fn header_decoding_never_panics(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = Header::decode(&data);
            let _ = Pointer::decode(&data);
        }
    }

    #[test]
    fn a_pointer_round_trips() {
        let p = Pointer {
            segment: 9,
            offset: 1 << 40,
            len: 70_000,
            check: 0xdead_beef,
        };
        let mut b = Vec::new();
        p.encode(&mut b);
        assert_eq!(b.len(), Pointer::ENCODED_LEN);
        assert_eq!(Pointer::decode(&b), Some(p));
        assert_eq!(Pointer::decode(&b[..19]), None);
        assert_eq!(p.record_len(4), 28 + 4 + 70_000);
    }
}

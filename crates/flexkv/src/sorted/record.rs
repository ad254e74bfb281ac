//! A key-value record as the sorted keyspace stores it in its FlexSpace (byte layout in
//! `docs/format.md`): FlexDB's varint lengths and raw bytes (§5.1), plus the sequence,
//! flags for a tombstone, a separated value and a prior-version pointer (SkimpyFTL), and
//! a CRC-32C over the whole record, so a reader that lands on a record (from the sparse
//! index, or by `read_extent` during recovery) can tell it is whole.

use crate::le::{get_u32, get_varint as varint, push_u32, put_varint};
use crate::vlog::Pointer;

const TOMBSTONE: u8 = 1;
const SEPARATED: u8 = 2;
const PRIOR: u8 = 4;
const KNOWN: u8 = TOMBSTONE | SEPARATED | PRIOR;

/// What a record's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordValue<'a> {
    /// The value itself.
    Inline(&'a [u8]),
    /// A value in the value log.
    Separated(Pointer),
    /// The key is deleted (kept while a snapshot may see an older version).
    Tombstone,
}

/// One record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    /// The sequence of the batch that wrote this version.
    pub seq: u64,
    /// The key.
    pub key: &'a [u8],
    /// The value.
    pub value: RecordValue<'a>,
    /// The version this one replaced, kept in the value log for older snapshots.
    pub prior: Option<Pointer>,
}

impl Record<'_> {
    /// Appends the encoded record to `out`; returns its length.
    pub fn encode(&self, out: &mut Vec<u8>) -> usize {
        let start = out.len();
        let (flags, body): (u8, &[u8]) = match self.value {
            RecordValue::Inline(v) => (0, v),
            RecordValue::Separated(_) => (SEPARATED, &[]),
            RecordValue::Tombstone => (TOMBSTONE, &[]),
        };
        out.push(flags | if self.prior.is_some() { PRIOR } else { 0 });
        put_varint(out, self.seq);
        put_varint(out, self.key.len() as u64);
        let value_len = match self.value {
            RecordValue::Separated(_) => Pointer::ENCODED_LEN,
            _ => body.len(),
        };
        put_varint(out, value_len as u64);
        // One reservation at most for the rest (the committer encodes a slice into one buffer).
        let prior_len = if self.prior.is_some() {
            Pointer::ENCODED_LEN
        } else {
            0
        };
        out.reserve(self.key.len() + value_len + prior_len + 4);
        out.extend_from_slice(self.key);
        match self.value {
            RecordValue::Separated(p) => p.encode(out),
            _ => out.extend_from_slice(body),
        }
        if let Some(p) = self.prior {
            p.encode(out);
        }
        let crc = crate::checksum::crc32c(&out[start..]);
        push_u32(out, crc);
        out.len() - start
    }

    /// Decodes the record at the start of `buf`; returns it and its length. `Err` says
    /// why the bytes are not a whole record.
    pub fn decode(buf: &[u8]) -> Result<(Record<'_>, usize), &'static str> {
        let flags = *buf.first().ok_or("record cut short")?;
        if flags & !KNOWN != 0 || flags & (TOMBSTONE | SEPARATED) == TOMBSTONE | SEPARATED {
            return Err("unknown record flags");
        }
        let mut at = 1;
        let seq = varint(buf, &mut at)?;
        let key_len = len(varint(buf, &mut at)?)?;
        let value_len = len(varint(buf, &mut at)?)?;
        let prior_len = if flags & PRIOR != 0 {
            Pointer::ENCODED_LEN
        } else {
            0
        };
        let end = at
            .checked_add(key_len)
            .and_then(|n| n.checked_add(value_len))
            .and_then(|n| n.checked_add(prior_len))
            .ok_or("record length overflows")?;
        let total = end.checked_add(4).ok_or("record length overflows")?;
        let whole = buf.get(..total).ok_or("record cut short")?;
        if crate::checksum::crc32c(&whole[..end]) != get_u32(whole, end) {
            return Err("record checksum mismatch");
        }
        let key = &whole[at..at + key_len];
        let body = &whole[at + key_len..at + key_len + value_len];
        let value = if flags & TOMBSTONE != 0 {
            if value_len != 0 {
                return Err("a tombstone with a value");
            }
            RecordValue::Tombstone
        } else if flags & SEPARATED != 0 {
            RecordValue::Separated(
                Pointer::decode(body)
                    .filter(|_| value_len == Pointer::ENCODED_LEN)
                    .ok_or("bad value pointer")?,
            )
        } else {
            RecordValue::Inline(body)
        };
        let prior = if prior_len > 0 {
            Some(Pointer::decode(&whole[end - prior_len..end]).ok_or("bad prior pointer")?)
        } else {
            None
        };
        Ok((
            Record {
                seq,
                key,
                value,
                prior,
            },
            total,
        ))
    }
}

impl<'a> Record<'a> {
    /// The record `rec` (exactly its bytes), verified already (an interval in memory),
    /// whose key lies at `key_off` and is `key_len` bytes long: the flags and the
    /// sequence are read from the header, and the value is what lies between the key
    /// and the prior pointer (if any) and the checksum. What a scan pays per record,
    /// where [`Record::decode`] also reads both lengths and checks every bound.
    pub(crate) fn decode_laid_out(rec: &'a [u8], key_off: usize, key_len: usize) -> Record<'a> {
        let broken = |what: &str| -> ! { unreachable!("a verified record's {what}") };
        let flags = rec[0];
        let mut at = 1;
        let seq = varint(rec, &mut at).unwrap_or_else(|_| broken("sequence"));
        let key_end = key_off + key_len;
        let body_end = body_end(flags, rec.len());
        let body = &rec[key_end..body_end];
        let value = if flags & TOMBSTONE != 0 {
            RecordValue::Tombstone
        } else if flags & SEPARATED != 0 {
            RecordValue::Separated(Pointer::decode(body).unwrap_or_else(|| broken("pointer")))
        } else {
            RecordValue::Inline(body)
        };
        let prior = (flags & PRIOR != 0).then(|| {
            Pointer::decode(&rec[body_end..rec.len() - 4])
                .unwrap_or_else(|| broken("prior pointer"))
        });
        Record {
            seq,
            key: &rec[key_off..key_end],
            value,
            prior,
        }
    }
}

/// The key of the record at the start of `buf`, read from its header alone (no
/// checksum): for searching records that were verified when they were loaded, and for
/// learning how many bytes a record's key needs during recovery (`Err` if `buf` is too
/// short to tell: `Err(n)` asks for at least `n` bytes).
pub(crate) fn peek_key(buf: &[u8]) -> Result<&[u8], usize> {
    peek_seq_key(buf).map(|(_, key)| key)
}

/// [`peek_key`], with the record's sequence, which the header gives on the way.
pub(crate) fn peek_seq_key(buf: &[u8]) -> Result<(u64, &[u8]), usize> {
    let mut at = 1;
    let mut header = || -> Result<(u64, usize), &'static str> {
        let seq = varint(buf, &mut at)?;
        let key_len = len(varint(buf, &mut at)?)?;
        varint(buf, &mut at)?;
        Ok((seq, key_len))
    };
    match header() {
        Ok((seq, key_len)) => buf
            .get(at..at + key_len)
            .map(|key| (seq, key))
            .ok_or(at + key_len),
        Err(_) => Err(buf.len() + 32),
    }
}

/// Where the value of a verified record of `rec_len` bytes with `flags` (its first
/// byte) ends: before the prior pointer, if it has one, and the checksum.
fn body_end(flags: u8, rec_len: usize) -> usize {
    let prior_len = if flags & PRIOR != 0 {
        Pointer::ENCODED_LEN
    } else {
        0
    };
    rec_len - 4 - prior_len
}

/// Where the value of a verified record lies within it, if the value is inline (not a
/// tombstone, not in the value log), from what an interval keeps of the record
/// without reading it: its `flags` (first byte), where its key ends and its length.
pub(crate) fn inline_value(
    flags: u8,
    key_end: usize,
    rec_len: usize,
) -> Option<std::ops::Range<usize>> {
    (flags & (TOMBSTONE | SEPARATED) == 0).then(|| key_end..body_end(flags, rec_len))
}

fn len(v: u64) -> Result<usize, &'static str> {
    usize::try_from(v).map_err(|_| "length out of range")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ptr(n: u32) -> Pointer {
        Pointer {
            segment: n,
            offset: u64::from(n) << 33,
            len: n * 3,
            check: n ^ 0xabcd,
        }
    }

    fn samples() -> Vec<Record<'static>> {
        vec![
            Record {
                seq: 1,
                key: b"k",
                value: RecordValue::Inline(b"value"),
                prior: None,
            },
            Record {
                seq: 0,
                key: b"",
                value: RecordValue::Inline(b""),
                prior: None,
            },
            Record {
                seq: u64::MAX,
                key: &[0xff; 300],
                value: RecordValue::Separated(ptr(7)),
                prior: Some(ptr(9)),
            },
            Record {
                seq: 42,
                key: b"gone",
                value: RecordValue::Tombstone,
                prior: Some(ptr(1)),
            },
            Record {
                seq: 5,
                key: b"x",
                value: RecordValue::Inline(&[7; 200]),
                prior: Some(ptr(2)),
            },
        ]
    }

    #[test]
    fn records_round_trip_back_to_back() {
        let mut buf = Vec::new();
        let lens: Vec<usize> = samples().iter().map(|r| r.encode(&mut buf)).collect();
        let mut at = 0;
        for (want, n) in samples().iter().zip(lens) {
            let (got, used) = Record::decode(&buf[at..]).unwrap();
            assert_eq!((&got, used), (want, n));
            at += used;
        }
        assert_eq!(at, buf.len());
        // FlexDB compactness: a 16-byte key and a 100-byte value take 9 bytes more
        // (flags, three varints, the CRC).
        let mut one = Vec::new();
        let r = Record {
            seq: 1000,
            key: &[1; 16],
            value: RecordValue::Inline(&[2; 100]),
            prior: None,
        };
        assert_eq!(r.encode(&mut one), 16 + 100 + 1 + 2 + 1 + 1 + 4);
    }

    #[test]
    fn a_record_laid_out_decodes_as_the_whole_decode_does() {
        for r in samples() {
            let mut buf = Vec::new();
            let n = r.encode(&mut buf);
            let (whole, _) = Record::decode(&buf).unwrap();
            let key_off = whole.key.as_ptr() as usize - buf.as_ptr() as usize;
            let laid = Record::decode_laid_out(&buf[..n], key_off, whole.key.len());
            assert_eq!(laid, r);
        }
    }

    #[test]
    fn every_truncation_and_flipped_bit_is_caught() {
        for r in samples() {
            let mut buf = Vec::new();
            r.encode(&mut buf);
            for cut in 0..buf.len() {
                assert!(Record::decode(&buf[..cut]).is_err(), "{r:?} cut at {cut}");
            }
            for i in 0..buf.len() {
                for bit in 0..8 {
                    let mut bad = buf.clone();
                    bad[i] ^= 1 << bit;
                    if let Ok((got, _)) = Record::decode(&bad) {
                        panic!("{r:?}: flip of bit {bit} at {i} decoded as {got:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn peek_key_reads_the_key_or_says_how_much_it_needs() {
        for r in samples() {
            let mut buf = Vec::new();
            r.encode(&mut buf);
            assert_eq!(peek_key(&buf), Ok(r.key));
            let need = peek_key(&buf[..2]).unwrap_err();
            assert!(need > 2, "a cut header asks for more bytes");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            let _ = Record::decode(&data);
        }
    }
}

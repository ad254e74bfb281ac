//! The WAL's bytes: blocks, fragments, and the compacted group record (byte layout in
//! `docs/format.md`).
//!
//! A segment is a sequence of 32 KiB blocks. A logical record is cut into fragments
//! that never cross a block boundary, each with an 8-byte header (CRC-32C, length,
//! type); fewer than 8 bytes left in a block are zero padding. Because every block
//! starts a fragment, a reader that meets a bad fragment can resynchronise at the next
//! block and look for evidence that what it skipped had once been durable.
//!
//! A record carries one group commit: the durable sequence known when it was written,
//! the first sequence, and its batches. Entries are compacted (FlatStore): no
//! per-entry sequence or checksum, varint lengths, small values inline and large values
//! as 20-byte value-log pointers.

use crate::le::{get_u16, get_u32, get_u64, get_varint, push_u16, push_u32, push_u64, put_varint};
use crate::memtable::KeyspaceId;
use crate::vlog::Pointer;

/// Bytes per block.
pub(crate) const BLOCK: usize = 32 * 1024;
/// Bytes per fragment header.
pub(crate) const FRAG_HEADER: usize = 8;

const FULL: u8 = 1;
const FIRST: u8 = 2;
const MIDDLE: u8 = 3;
const LAST: u8 = 4;

/// Cuts `payload` into fragments for a segment whose end is at `file_len`, appending
/// the bytes to `out`. Returns the new file length.
pub(crate) fn frame(out: &mut Vec<u8>, mut file_len: u64, payload: &[u8]) -> u64 {
    let mut rest = payload;
    let mut first = true;
    loop {
        let left = BLOCK - (file_len % BLOCK as u64) as usize;
        if left < FRAG_HEADER {
            out.resize(out.len() + left, 0);
            file_len += left as u64;
            continue;
        }
        let n = rest.len().min(left - FRAG_HEADER);
        let last = n == rest.len();
        let kind = match (first, last) {
            (true, true) => FULL,
            (true, false) => FIRST,
            (false, false) => MIDDLE,
            (false, true) => LAST,
        };
        let start = out.len();
        push_u32(out, 0);
        push_u16(out, n as u16);
        out.push(kind);
        out.push(0);
        out.extend_from_slice(&rest[..n]);
        let crc = crate::checksum::crc32c(&out[start + 4..]);
        out[start..start + 4].copy_from_slice(&crc.to_le_bytes());
        file_len += (FRAG_HEADER + n) as u64;
        rest = &rest[n..];
        first = false;
        if last {
            return file_len;
        }
    }
}

/// What a reader found at one place in a segment.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Found {
    /// A whole record that starts at `offset`.
    Record { offset: u64, payload: Vec<u8> },
    /// Bytes at `offset` that are not a valid fragment, or fragments out of order.
    Bad { offset: u64, reason: &'static str },
}

/// A fragment (type, body, offset), the clean end, or damage (offset, reason).
type FragResult<'a> = Result<Option<(u8, &'a [u8], usize)>, (usize, &'static str)>;

/// Reads the records of a segment's bytes in order. After a bad spot it resumes at the
/// next block and skips to the next record start, so callers can look past damage.
pub(crate) struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Reader { data, at: 0 }
    }

    /// The next fragment: `Ok(None)` at a clean end (the file ends, or the rest of it is
    /// zeros, as a preallocated or torn tail can be). On damage, the reader resumes where
    /// the fragment's length says the next one starts, if that is inside the block (a
    /// wrong guess meets a checksum and fails again), or else at the next block.
    fn fragment(&mut self) -> FragResult<'a> {
        let r = self.fragment_at();
        if let Err((start, _)) = r {
            let block_end = (start / BLOCK + 1) * BLOCK;
            if self.at <= start || self.at > block_end {
                self.at = block_end;
            }
        }
        r
    }

    fn fragment_at(&mut self) -> FragResult<'a> {
        loop {
            let start = self.at;
            let left = BLOCK - start % BLOCK;
            if start >= self.data.len() {
                return Ok(None);
            }
            if left < FRAG_HEADER {
                self.at += left;
                continue;
            }
            let head = self.data.get(start..start + FRAG_HEADER);
            let Some(head) = head else {
                return self.zeros_or(start, "fragment header cut short");
            };
            let len = get_u16(head, 4) as usize;
            let kind = head[6];
            if get_u32(head, 0) == 0 && len == 0 && kind == 0 {
                return self.zeros_or(start, "zero fragment header");
            }
            if FRAG_HEADER + len > left {
                return Err((start, "fragment crosses a block boundary"));
            }
            let Some(body) = self
                .data
                .get(start + FRAG_HEADER..start + FRAG_HEADER + len)
            else {
                return Err((start, "fragment cut short"));
            };
            self.at = start + FRAG_HEADER + len;
            let crc = crate::checksum::crc32c_append(crate::checksum::crc32c(&head[4..]), body);
            if crc != get_u32(head, 0) || !(FULL..=LAST).contains(&kind) || head[7] != 0 {
                return Err((start, "fragment checksum mismatch"));
            }
            return Ok(Some((kind, body, start)));
        }
    }

    fn zeros_or<T>(
        &self,
        start: usize,
        reason: &'static str,
    ) -> Result<Option<T>, (usize, &'static str)> {
        if self.data[start..].iter().all(|&b| b == 0) {
            Ok(None)
        } else {
            Err((start, reason))
        }
    }
}

impl Iterator for Reader<'_> {
    type Item = Found;

    fn next(&mut self) -> Option<Found> {
        let mut record: Option<(usize, Vec<u8>)> = None;
        loop {
            let bad = |offset: usize, reason| Found::Bad {
                offset: offset as u64,
                reason,
            };
            match self.fragment() {
                Ok(None) => {
                    return record.map(|(offset, _)| bad(offset, "record cut short at the end"));
                }
                Err((offset, reason)) => {
                    let offset = record.map_or(offset, |(o, _)| o);
                    return Some(bad(offset, reason));
                }
                Ok(Some((kind, body, offset))) => match (kind, record.as_mut()) {
                    (FULL, None) => {
                        return Some(Found::Record {
                            offset: offset as u64,
                            payload: body.to_vec(),
                        })
                    }
                    (FIRST, None) => record = Some((offset, body.to_vec())),
                    (MIDDLE, Some((_, buf))) => buf.extend_from_slice(body),
                    (LAST, Some((start, buf))) => {
                        buf.extend_from_slice(body);
                        return Some(Found::Record {
                            offset: *start as u64,
                            payload: std::mem::take(buf),
                        });
                    }
                    (_, open) => {
                        let start = open.map_or(offset, |(o, _)| *o);
                        return Some(bad(start, "fragments out of order"));
                    }
                },
            }
        }
    }
}

/// One operation of a batch as the WAL holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// A put with the value inline.
    Put {
        ks: KeyspaceId,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    /// A put whose value is in the value log.
    PutSeparated {
        ks: KeyspaceId,
        key: Vec<u8>,
        ptr: Pointer,
    },
    /// A delete.
    Delete { ks: KeyspaceId, key: Vec<u8> },
}

const TAG_PUT: u8 = 1;
const TAG_SEPARATED: u8 = 2;
const TAG_DELETE: u8 = 3;
/// The tag of the record that opens every segment.
const TAG_SEGMENT_HEADER: u8 = 0xF1;

/// The magic number at the start of a segment header record.
pub(crate) const MAGIC: &[u8; 8] = b"FLEXKVWL";

/// A segment's first record: magic, format version, segment number.
pub(crate) fn segment_header(version: u32, id: u32) -> Vec<u8> {
    let mut out = vec![TAG_SEGMENT_HEADER];
    out.extend_from_slice(MAGIC);
    push_u32(&mut out, version);
    push_u32(&mut out, id);
    out
}

/// Decodes a segment header record into `(version, id)`.
pub(crate) fn parse_segment_header(p: &[u8]) -> Option<(u32, u32)> {
    if p.len() != 17 || p[0] != TAG_SEGMENT_HEADER || &p[1..9] != MAGIC {
        return None;
    }
    Some((get_u32(p, 9), get_u32(p, 13)))
}

/// A group-commit record: consecutive batches with consecutive sequences.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    /// The highest sequence known durable when this record was written.
    pub(crate) durable: u64,
    /// The sequence of the first batch; batch `i` has `first + i`.
    pub(crate) first: u64,
    pub(crate) batches: Vec<Vec<Op>>,
}

impl Group {
    /// The sequence of the last batch.
    pub(crate) fn last(&self) -> u64 {
        self.first + self.batches.len() as u64 - 1
    }
}

/// Encodes a group record header; batches follow through [`encode_batch`].
pub(crate) fn encode_group_header(out: &mut Vec<u8>, durable: u64, first: u64, batches: u32) {
    push_u64(out, durable);
    push_u64(out, first);
    push_u32(out, batches);
}

/// Appends one batch: its op count, then each op.
pub(crate) fn encode_batch<'a>(out: &mut Vec<u8>, ops: impl ExactSizeIterator<Item = OpRef<'a>>) {
    push_u32(out, ops.len() as u32);
    for op in ops {
        let (tag, ks, key) = match op {
            OpRef::Put { ks, key, .. } => (TAG_PUT, ks, key),
            OpRef::PutSeparated { ks, key, .. } => (TAG_SEPARATED, ks, key),
            OpRef::Delete { ks, key } => (TAG_DELETE, ks, key),
        };
        out.push(tag);
        put_varint(out, u64::from(ks));
        put_varint(out, key.len() as u64);
        out.extend_from_slice(key);
        match op {
            OpRef::Put { value, .. } => {
                put_varint(out, value.len() as u64);
                out.extend_from_slice(value);
            }
            OpRef::PutSeparated { ptr, .. } => ptr.encode(out),
            OpRef::Delete { .. } => {}
        }
    }
}

/// A borrowed op, for encoding without copying the batch.
#[derive(Clone, Copy, Debug)]
pub(crate) enum OpRef<'a> {
    Put {
        ks: KeyspaceId,
        key: &'a [u8],
        value: &'a [u8],
    },
    PutSeparated {
        ks: KeyspaceId,
        key: &'a [u8],
        ptr: Pointer,
    },
    Delete {
        ks: KeyspaceId,
        key: &'a [u8],
    },
}

/// Decodes a group record; `Err` says what is malformed. The bytes passed a CRC, so a
/// failure here means a bug or a collision, and is reported as corruption.
pub(crate) fn decode_group(p: &[u8]) -> Result<Group, &'static str> {
    let mut c = Cursor { b: p, at: 0 };
    let durable = c.u64()?;
    let first = c.u64()?;
    let n = c.u32()?;
    if n == 0 {
        return Err("group record without batches");
    }
    let mut batches = Vec::with_capacity(n.min(1 << 16) as usize);
    for _ in 0..n {
        let ops = c.u32()?;
        let mut batch = Vec::with_capacity(ops.min(1 << 16) as usize);
        for _ in 0..ops {
            let tag = c.take(1)?[0];
            let ks = u32::try_from(c.varint()?).map_err(|_| "keyspace id out of range")?;
            let klen = c.len()?;
            let key = c.take(klen)?.to_vec();
            batch.push(match tag {
                TAG_PUT => {
                    let vlen = c.len()?;
                    let value = c.take(vlen)?.to_vec();
                    Op::Put { ks, key, value }
                }
                TAG_SEPARATED => {
                    let ptr = Pointer::decode(c.take(Pointer::ENCODED_LEN)?)
                        .ok_or("pointer cut short")?;
                    Op::PutSeparated { ks, key, ptr }
                }
                TAG_DELETE => Op::Delete { ks, key },
                _ => return Err("unknown op tag"),
            });
        }
        batches.push(batch);
    }
    if c.at != p.len() {
        return Err("bytes after the last batch");
    }
    Ok(Group {
        durable,
        first,
        batches,
    })
}

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        let end = self.at.checked_add(n).ok_or("length overflows")?;
        let s = self.b.get(self.at..end).ok_or("record cut short")?;
        self.at = end;
        Ok(s)
    }
    fn u64(&mut self) -> Result<u64, &'static str> {
        Ok(get_u64(self.take(8)?, 0))
    }
    fn u32(&mut self) -> Result<u32, &'static str> {
        Ok(get_u32(self.take(4)?, 0))
    }
    fn varint(&mut self) -> Result<u64, &'static str> {
        get_varint(self.b, &mut self.at)
    }
    fn len(&mut self) -> Result<usize, &'static str> {
        usize::try_from(self.varint()?).map_err(|_| "length out of range")
    }
}

#[cfg(test)]
mod tests;

//! The logical log of a FlexSpace (FlexSpace §4.2, "Logical Logging").
//!
//! Every change to the FlexTree since the last checkpoint is one small fixed-size entry,
//! so that the tree file is rewritten only now and then. The log applies on top of the
//! checkpoint whose sequence number its header names (its *epoch*); a log of another
//! epoch is stale and ignored.
//!
//! Layout (all integers little-endian, see `docs/format.md`):
//! - block 0, the header: magic, version, epoch, CRC32C;
//! - blocks 1, 2, …: CRC32C of the rest of the block, entry count, the block's own
//!   number, then the entries. Since version 3 an entry is its kind and its fields as
//!   varints, most of them told as the difference from the entry before it in the same
//!   block: about 5 bytes where versions 1 and 2 took [`FIXED_ENTRY`] (the paper's are
//!   24); a 10M random load's log wrote 66 MB where it wrote 499 MB. Each block starts
//!   its differences afresh, so it reads alone.
//!
//! Every commit writes whole new blocks (never rewrites one that a sync already covered),
//! so a crash can only tear the blocks being written. Reading stops at the first block
//! whose checksum or number is wrong: a torn tail reads as the end of the log.
//!
//! A commit is all or nothing: every block of a commit but its last carries
//! [`CONTINUED`], and a commit whose last block is not read is dropped whole. A
//! commit is what one `FlexSpace::sync` makes durable, and its callers build changes
//! of several operations (the sorted keyspace's interval edits) that only a whole
//! commit keeps consistent; a prefix torn at a block boundary could otherwise keep a
//! collapse without the insert that followed it, or half of one insert.

use crate::io::VfsFile;
use crate::le::{get_u32 as get32, get_u64 as get, get_varint, put_u64 as put, put_varint};
use crate::{Error, Result};

pub(crate) const BLOCK: usize = 4096;
const MAGIC: &[u8; 8] = b"FLXSLOG1";
/// Version 2 added [`CONTINUED`]; a version-1 log (no block carries it) reads as before,
/// every block a commit of its own. Version 3 made entries varints ([`LogOp::encode`]);
/// versions 1 and 2 are read with their fixed entries.
pub(crate) const VERSION: u32 = 3;
/// The size of an entry in versions 1 and 2. It is also what an entry weighs in the
/// checkpoint rule (`FlexSpace::sync`): the tree is checkpointed as often as when every
/// entry took this much, so a replay after a crash applies no more entries than before.
pub(crate) const FIXED_ENTRY: usize = 40;
const BLOCK_HEAD: usize = 16;
/// Entries in a block of version 1 or 2.
const FIXED_PER_BLOCK: usize = (BLOCK - BLOCK_HEAD) / FIXED_ENTRY;
/// The most bytes a version-3 entry takes: its kind and four varints of up to 10 bytes.
const MAX_ENTRY: usize = 1 + 4 * 10;
/// Blocks a commit encodes and writes at a time (1 MiB).
const WRITE_BLOCKS: usize = 256;
/// Pending entries are kept in pieces of this many (160 KiB), each allocated once: a
/// commit of a whole memtable logs hundreds of thousands of entries, and one vector
/// of them, doubling as it grew, copied up to 20 MB at a time inside the change that
/// pushed the entry, 10 to 60 ms in the committer's write sections at 10M pairs.
const PIECE: usize = 4096;
/// The bit of a block's entry count that says the block's commit goes on in the next.
const CONTINUED: u32 = 1 << 31;

/// One logged change to the FlexTree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogOp {
    /// `FlexTree::insert` (merging with the extent before it when contiguous, as the
    /// original did).
    Insert { off: u64, len: u64, addr: u64 },
    /// `FlexTree::collapse`.
    Collapse { off: u64, len: u64 },
    /// `FlexTree::overwrite` with a data address.
    Overwrite { off: u64, len: u64, addr: u64 },
    /// `FlexTree::remap` (a GC relocation).
    Remap {
        off: u64,
        len: u64,
        old: u64,
        new: u64,
    },
    /// `FlexTree::set_tag`.
    Tag { off: u64, tag: u8 },
    /// The checksum of a data block's first `fill` bytes (see `space::crc`).
    BlockSum { block: u64, fill: u32, crc: u32 },
    /// `FlexTree::insert_hole`.
    InsertHole { off: u64, len: u64 },
}

/// What a version-3 entry's fields are told against: the entries before it in its
/// block leave them, and each block starts from zeros.
#[derive(Clone, Copy, Debug, Default)]
struct Deltas {
    /// The last entry's offset: a commit's edits go through the space in order.
    off: u64,
    /// Where the last entry's data ended (address + length): new data is appended.
    addr: u64,
    /// The block after the last checksum's: a commit's checksums are of blocks in a row.
    block: u64,
}

/// A difference as a varint's value: small of either sign is small (zigzag).
fn zigzag(now: u64, before: u64) -> u64 {
    let d = now.wrapping_sub(before) as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

/// The inverse of [`zigzag`].
fn unzigzag(z: u64, before: u64) -> u64 {
    before.wrapping_add((z >> 1) ^ (z & 1).wrapping_neg())
}

impl Deltas {
    fn put_off(&mut self, out: &mut Vec<u8>, off: u64) {
        put_varint(out, zigzag(off, self.off));
        self.off = off;
    }

    fn put_addr(&mut self, out: &mut Vec<u8>, addr: u64, len: u64) {
        put_varint(out, zigzag(addr, self.addr));
        self.addr = addr.wrapping_add(len);
    }

    fn off(&mut self, z: u64) -> u64 {
        self.off = unzigzag(z, self.off);
        self.off
    }

    fn addr(&mut self, z: u64, len: u64) -> u64 {
        let addr = unzigzag(z, self.addr);
        self.addr = addr.wrapping_add(len);
        addr
    }
}

impl LogOp {
    /// Appends the entry in version 3's form (`docs/format.md`): its kind, then its
    /// fields as varints, offsets and addresses as differences from `d`, which it
    /// moves on.
    fn encode(&self, d: &mut Deltas, out: &mut Vec<u8>) {
        match *self {
            LogOp::Insert { off, len, addr } | LogOp::Overwrite { off, len, addr } => {
                out.push(if matches!(self, LogOp::Insert { .. }) {
                    1
                } else {
                    3
                });
                d.put_off(out, off);
                put_varint(out, len);
                d.put_addr(out, addr, len);
            }
            LogOp::Collapse { off, len } | LogOp::InsertHole { off, len } => {
                out.push(if matches!(self, LogOp::Collapse { .. }) {
                    2
                } else {
                    7
                });
                d.put_off(out, off);
                put_varint(out, len);
            }
            LogOp::Remap { off, len, old, new } => {
                out.push(4);
                d.put_off(out, off);
                put_varint(out, len);
                d.put_addr(out, new, len);
                put_varint(out, zigzag(old, new));
            }
            LogOp::Tag { off, tag } => {
                out.push(5);
                d.put_off(out, off);
                out.push(tag);
            }
            LogOp::BlockSum { block, fill, crc } => {
                out.push(6);
                put_varint(out, zigzag(block, d.block));
                d.block = block.wrapping_add(1);
                put_varint(out, u64::from(fill));
                out.extend_from_slice(&crc.to_le_bytes());
            }
        }
    }

    /// Decodes the version-3 entry at `*at`, advancing it and `d`; an error for an
    /// unknown kind or an entry the block's end cuts short.
    fn decode(
        buf: &[u8],
        at: &mut usize,
        d: &mut Deltas,
    ) -> std::result::Result<LogOp, &'static str> {
        let take = |at: &mut usize, n: usize| {
            let b = buf.get(*at..*at + n).ok_or("entry cut short");
            *at += n;
            b
        };
        let v = |at: &mut usize| get_varint(buf, at);
        let kind = take(at, 1)?[0];
        Ok(match kind {
            1 | 3 => {
                let off = d.off(v(at)?);
                let len = v(at)?;
                let addr = d.addr(v(at)?, len);
                match kind {
                    1 => LogOp::Insert { off, len, addr },
                    _ => LogOp::Overwrite { off, len, addr },
                }
            }
            2 => LogOp::Collapse {
                off: d.off(v(at)?),
                len: v(at)?,
            },
            7 => LogOp::InsertHole {
                off: d.off(v(at)?),
                len: v(at)?,
            },
            4 => {
                let off = d.off(v(at)?);
                let len = v(at)?;
                let new = d.addr(v(at)?, len);
                let old = unzigzag(v(at)?, new);
                LogOp::Remap { off, len, old, new }
            }
            5 => {
                let off = d.off(v(at)?);
                let tag = take(at, 1)?[0];
                LogOp::Tag { off, tag }
            }
            6 => {
                let block = unzigzag(v(at)?, d.block);
                d.block = block.wrapping_add(1);
                let fill = u32::try_from(v(at)?).map_err(|_| "fill out of range")?;
                let crc = get32(take(at, 4)?, 0);
                LogOp::BlockSum { block, fill, crc }
            }
            _ => return Err("unknown log operation"),
        })
    }

    /// Decodes an entry of version 1 or 2: kind (u8), tag (u8), six zero bytes, then four
    /// u64 fields. `None` for a kind those versions did not know.
    fn decode_fixed(buf: &[u8]) -> Option<LogOp> {
        let (a, b, c, d) = (get(buf, 8), get(buf, 16), get(buf, 24), get(buf, 32));
        Some(match buf[0] {
            1 => LogOp::Insert {
                off: a,
                len: b,
                addr: c,
            },
            2 => LogOp::Collapse { off: a, len: b },
            3 => LogOp::Overwrite {
                off: a,
                len: b,
                addr: c,
            },
            4 => LogOp::Remap {
                off: a,
                len: b,
                old: c,
                new: d,
            },
            5 => LogOp::Tag {
                off: a,
                tag: buf[1],
            },
            6 => LogOp::BlockSum {
                block: a,
                fill: u32::try_from(b).ok()?,
                crc: u32::try_from(c).ok()?,
            },
            7 => LogOp::InsertHole { off: a, len: b },
            _ => return None,
        })
    }
}

fn header(epoch: u64) -> Vec<u8> {
    let mut h = vec![0u8; BLOCK];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    put(&mut h, 16, epoch);
    let crc = crate::checksum::crc32c(&h[..24]);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    h
}

/// What a log holds: the epoch it applies to (`None` if it has no valid header, which a
/// crash during a reset can leave), the entries of its whole commits up to the first bad
/// block, and the number of the first block after them.
#[derive(Debug)]
pub(crate) struct LogContents {
    pub epoch: Option<u64>,
    /// The header's format version (0 without a valid header).
    pub version: u32,
    pub ops: Vec<LogOp>,
    pub next_block: u64,
}

/// Reads a whole log. A header from a newer format version is an error (nothing is
/// changed); a bad block ends the log, and drops the commit it is part of.
pub(crate) fn read(file: &dyn VfsFile) -> Result<LogContents> {
    let len = file.len()?;
    let empty = LogContents {
        epoch: None,
        version: 0,
        ops: Vec::new(),
        next_block: 1,
    };
    if len < BLOCK as u64 {
        return Ok(empty);
    }
    let mut h = vec![0u8; BLOCK];
    file.read_exact_at(&mut h, 0)?;
    if &h[..8] != MAGIC || crate::checksum::crc32c(&h[..24]) != get32(&h, 24) {
        return Ok(empty);
    }
    let version = get32(&h, 8);
    if version > VERSION {
        return Err(Error::corruption(
            file.path(),
            8,
            format!("log format version {version} is newer than {VERSION}"),
        ));
    }
    let epoch = get(&h, 16);
    let mut ops = Vec::new();
    // Where the last whole commit read so far ends: its entries and its next block.
    let (mut whole, mut next_block) = (0, 1u64);
    let mut block = vec![0u8; BLOCK];
    let mut n = 1u64;
    while (n + 1) * BLOCK as u64 <= len {
        file.read_exact_at(&mut block, n * BLOCK as u64)?;
        let word = get32(&block, 4);
        let count = (word & !CONTINUED) as usize;
        let most = if version < 3 {
            FIXED_PER_BLOCK
        } else {
            BLOCK - BLOCK_HEAD
        };
        let valid = crate::checksum::crc32c(&block[4..]) == get32(&block, 0)
            && get(&block, 8) == n
            && count <= most;
        if !valid {
            break;
        }
        let (mut at, mut deltas) = (BLOCK_HEAD, Deltas::default());
        for _ in 0..count {
            let entry_at = at;
            let op = if version < 3 {
                at += FIXED_ENTRY;
                LogOp::decode_fixed(&block[entry_at..at]).ok_or("unknown log operation")
            } else {
                LogOp::decode(&block, &mut at, &mut deltas)
            };
            ops.push(op.map_err(|e| {
                Error::corruption(file.path(), n * BLOCK as u64 + entry_at as u64, e)
            })?);
        }
        n += 1;
        if word & CONTINUED == 0 {
            (whole, next_block) = (ops.len(), n);
        }
    }
    // A commit whose last block was not read (torn, or never written) is dropped whole.
    ops.truncate(whole);
    Ok(LogContents {
        epoch: Some(epoch),
        version,
        ops,
        next_block,
    })
}

/// Appends entries in whole blocks.
pub(crate) struct LogWriter {
    next_block: u64,
    /// The entries waiting for the next commit, in order, in pieces (see [`PIECE`]).
    pending: Vec<Vec<LogOp>>,
    /// How many entries `pending` holds.
    pending_len: usize,
    /// Entries the log holds since its last reset: what a replay of it applies.
    entries: u64,
    /// Bytes written to the log file, for write amplification.
    pub bytes_written: u64,
}

impl LogWriter {
    /// A writer that continues after `next_block`, in a log that holds `entries`.
    pub(crate) fn new(next_block: u64, entries: u64) -> Self {
        LogWriter {
            next_block,
            pending: Vec::new(),
            pending_len: 0,
            entries,
            bytes_written: 0,
        }
    }

    pub(crate) fn push(&mut self, op: LogOp) {
        match self.pending.last_mut() {
            // A piece is never grown past what it was allocated with.
            Some(piece) if piece.len() < piece.capacity() => piece.push(op),
            _ => {
                let mut piece = Vec::with_capacity(PIECE);
                piece.push(op);
                self.pending.push(piece);
            }
        }
        self.pending_len += 1;
    }

    /// Puts `ops` before every pending entry (checksums go before the changes that refer
    /// to the data they cover).
    pub(crate) fn prepend(&mut self, ops: Vec<LogOp>) {
        if !ops.is_empty() {
            self.pending_len += ops.len();
            self.pending.insert(0, ops);
        }
    }

    /// How many entries wait for the next commit.
    pub(crate) fn pending(&self) -> usize {
        self.pending_len
    }

    /// What the log counts against its limit (`FlexSpace::sync`): its entries at
    /// [`FIXED_ENTRY`] bytes each, or its file's bytes if that is more (every commit
    /// takes a whole block, so a log of small commits is larger than its entries).
    pub(crate) fn weight(&self) -> u64 {
        (self.entries * FIXED_ENTRY as u64).max(self.next_block * BLOCK as u64)
    }

    /// Writes the pending entries as new blocks and syncs the file. On failure nothing
    /// is forgotten: the entries stay pending (the caller poisons the space anyway).
    ///
    /// Each block takes the entries that fit whole in it. The blocks are encoded and
    /// written [`WRITE_BLOCKS`] at a time: a commit of a whole memtable logs hundreds
    /// of thousands of entries, and one buffer for all of them was 20 MiB more at the
    /// commit's peak. Recovery reads a commit as whole only once its last block is
    /// there, so writing it in pieces before the one sync changes nothing a crash can
    /// leave.
    pub(crate) fn commit(&mut self, file: &dyn VfsFile) -> Result<()> {
        if self.pending_len == 0 {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(WRITE_BLOCKS * BLOCK);
        let mut entry = Vec::with_capacity(MAX_ENTRY);
        // The block number of `buf`'s first block, and of the block being filled.
        let (mut first, mut n) = (self.next_block, self.next_block);
        let mut ops = self.pending.iter().flatten().peekable();
        while ops.peek().is_some() {
            let start = buf.len();
            buf.resize(start + BLOCK_HEAD, 0);
            let (mut count, mut deltas) = (0u32, Deltas::default());
            while let Some(op) = ops.peek() {
                let mut d = deltas;
                entry.clear();
                op.encode(&mut d, &mut entry);
                if buf.len() - start + entry.len() > BLOCK {
                    break;
                }
                buf.extend_from_slice(&entry);
                (deltas, count) = (d, count + 1);
                ops.next();
            }
            buf.resize(start + BLOCK, 0);
            let block = &mut buf[start..];
            let more = if ops.peek().is_some() { CONTINUED } else { 0 };
            block[4..8].copy_from_slice(&(count | more).to_le_bytes());
            put(block, 8, n);
            let crc = crate::checksum::crc32c(&block[4..]);
            block[..4].copy_from_slice(&crc.to_le_bytes());
            n += 1;
            if buf.len() == WRITE_BLOCKS * BLOCK || more == 0 {
                file.write_at(&buf, first * BLOCK as u64)?;
                first = n;
                buf.clear();
            }
        }
        file.sync()?;
        self.bytes_written += (n - self.next_block) * BLOCK as u64;
        self.next_block = n;
        self.entries += self.pending_len as u64;
        self.clear_pending();
        Ok(())
    }

    /// Empties the log and starts epoch `epoch`: truncate, write the header, sync. A crash
    /// in between leaves a log with no valid header, which reads as empty.
    pub(crate) fn reset(&mut self, file: &dyn VfsFile, epoch: u64) -> Result<()> {
        file.set_len(0)?;
        file.write_at(&header(epoch), 0)?;
        file.sync()?;
        self.bytes_written += BLOCK as u64;
        self.next_block = 1;
        self.entries = 0;
        self.clear_pending();
        Ok(())
    }

    /// Forgets the pending entries, keeping one piece's room (the entries of a large
    /// commit are not kept room for until the next one).
    fn clear_pending(&mut self) {
        self.pending.truncate(1);
        match self.pending.first_mut() {
            Some(piece) if piece.capacity() == PIECE => piece.clear(),
            _ => self.pending.clear(),
        }
        self.pending_len = 0;
    }
}

/// Writes a log of version 1 or 2 holding `ops` (fixed entries; for version 2 one
/// commit, for version 1 one per block), for the tests that read or replace old logs.
#[cfg(test)]
pub(crate) fn write_fixed(file: &dyn VfsFile, epoch: u64, version: u32, ops: &[LogOp]) {
    let mut h = header(epoch);
    h[8..12].copy_from_slice(&version.to_le_bytes());
    let crc = crate::checksum::crc32c(&h[..24]);
    h[24..28].copy_from_slice(&crc.to_le_bytes());
    file.set_len(0).unwrap();
    file.write_at(&h, 0).unwrap();
    let chunks: Vec<_> = ops.chunks(FIXED_PER_BLOCK).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let mut block = vec![0u8; BLOCK];
        let more = if version >= 2 && i + 1 < chunks.len() {
            CONTINUED
        } else {
            0
        };
        block[4..8].copy_from_slice(&(chunk.len() as u32 | more).to_le_bytes());
        put(&mut block, 8, i as u64 + 1);
        for (j, op) in chunk.iter().enumerate() {
            let e = &mut block[BLOCK_HEAD + j * FIXED_ENTRY..][..FIXED_ENTRY];
            let (kind, tag, a, b, c, d) = match *op {
                LogOp::Insert { off, len, addr } => (1, 0, off, len, addr, 0),
                LogOp::Collapse { off, len } => (2, 0, off, len, 0, 0),
                LogOp::Overwrite { off, len, addr } => (3, 0, off, len, addr, 0),
                LogOp::Remap { off, len, old, new } => (4, 0, off, len, old, new),
                LogOp::Tag { off, tag } => (5, tag, off, 0, 0, 0),
                LogOp::BlockSum { block, fill, crc } => {
                    (6, 0, block, u64::from(fill), u64::from(crc), 0)
                }
                LogOp::InsertHole { off, len } => (7, 0, off, len, 0, 0),
            };
            (e[0], e[1]) = (kind, tag);
            for (k, v) in [a, b, c, d].into_iter().enumerate() {
                put(e, 8 + 8 * k, v);
            }
        }
        let crc = crate::checksum::crc32c(&block[4..]);
        block[..4].copy_from_slice(&crc.to_le_bytes());
        file.write_at(&block, (i as u64 + 1) * BLOCK as u64)
            .unwrap();
    }
    file.sync().unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{CrashMode, FaultVfs, OpenMode, Vfs};
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    /// `n` entries of every kind, with fields of every size (up to `u64::MAX`), in an
    /// order no delta is small for.
    fn ops(n: u64) -> Vec<LogOp> {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        (0..n)
            .map(|i| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let big = x >> (x % 64);
                match i % 5 {
                    0 => LogOp::Insert {
                        off: big,
                        len: i + 1,
                        addr: i * 7,
                    },
                    1 => LogOp::Collapse { off: i, len: big },
                    2 => LogOp::Overwrite {
                        off: i,
                        len: 9,
                        addr: u64::MAX - big,
                    },
                    3 => LogOp::Remap {
                        off: big,
                        len: 2,
                        old: big / 3,
                        new: x,
                    },
                    4 if i % 2 == 0 => LogOp::BlockSum {
                        block: big,
                        fill: 4096,
                        crc: u32::MAX - i as u32,
                    },
                    4 if i % 3 == 0 => LogOp::InsertHole { off: i, len: big },
                    _ => LogOp::Tag {
                        off: big,
                        tag: (i % 256) as u8,
                    },
                }
            })
            .collect()
    }

    fn open(vfs: &FaultVfs) -> Arc<dyn VfsFile> {
        vfs.create_dir_all(Path::new("/s")).unwrap();
        let f = vfs.open(Path::new("/s/log"), OpenMode::Create).unwrap();
        vfs.sync_dir(Path::new("/s")).unwrap();
        f
    }

    /// A new file system with an empty log of epoch `epoch`, and its writer.
    fn fresh_log(seed: u64, epoch: u64) -> (FaultVfs, Arc<dyn VfsFile>, LogWriter) {
        let vfs = FaultVfs::new(seed);
        let f = open(&vfs);
        let mut w = LogWriter::new(1, 0);
        w.reset(&*f, epoch).unwrap();
        (vfs, f, w)
    }

    /// The blocks a commit of `ops` takes (a clean commit into a fresh log).
    fn blocks_of(ops: &[LogOp]) -> u64 {
        let (_vfs, f, mut w) = fresh_log(99, 1);
        ops.iter().for_each(|&op| w.push(op));
        w.commit(&*f).unwrap();
        w.next_block - 1
    }

    #[test]
    fn every_entry_kind_round_trips() {
        let all = ops(2_000);
        let (mut buf, mut d) = (Vec::new(), Deltas::default());
        for op in &all {
            let at = buf.len();
            op.encode(&mut d, &mut buf);
            assert!(buf.len() - at <= MAX_ENTRY, "{op:?}");
        }
        let (mut at, mut d) = (0, Deltas::default());
        let back: Vec<_> = (0..all.len())
            .map(|_| LogOp::decode(&buf, &mut at, &mut d).unwrap())
            .collect();
        assert_eq!((back, at), (all, buf.len()));
        // An unknown kind, and an entry the block's end cuts short, are errors.
        let mut d = Deltas::default();
        assert!(LogOp::decode(&[9, 0, 0], &mut 0, &mut d).is_err());
        let mut one = Vec::new();
        LogOp::BlockSum {
            block: 3,
            fill: 9,
            crc: 7,
        }
        .encode(&mut Deltas::default(), &mut one);
        for cut in 0..one.len() {
            let r = LogOp::decode(&one[..cut], &mut 0, &mut Deltas::default());
            assert!(r.is_err(), "cut at {cut}");
        }
    }

    /// What a commit of a memtable logs: edits of records through the space in order
    /// (each a collapse and an insert of data appended to the open segment) and the
    /// checksums of the blocks it filled. Each entry takes a few bytes, not the 40 of
    /// versions 1 and 2.
    #[test]
    fn a_commits_entries_take_a_few_bytes_each() {
        let (_vfs, f, mut w) = fresh_log(2, 1);
        let (mut off, mut addr) = (1_000_000u64, 3_000_000_000u64);
        let mut n = 0;
        for block in 0..100u64 {
            w.push(LogOp::BlockSum {
                block: 700_000 + block,
                fill: 4096,
                crc: 0xDEAD_BEEF,
            });
            n += 1;
        }
        for i in 0..10_000u64 {
            off += 1_000 + i % 3_000;
            let len = 100 + i % 1_500;
            w.push(LogOp::Collapse { off, len: len - 40 });
            w.push(LogOp::Insert { off, len, addr });
            addr += len;
            n += 2;
        }
        w.commit(&*f).unwrap();
        let bytes = (w.next_block - 1) * BLOCK as u64;
        assert!(bytes <= 8 * n, "{n} entries in {bytes} bytes");
        assert_eq!(read(&*f).unwrap().ops.len() as u64, n);
    }

    #[test]
    fn commits_append_blocks_that_read_back_in_order() {
        let (_vfs, f, mut w) = fresh_log(1, 7);
        let all = ops(5_000);
        for chunk in all.chunks(1_300) {
            chunk.iter().for_each(|&op| w.push(op));
            let before = w.next_block;
            w.commit(&*f).unwrap();
            assert_eq!(w.next_block - before, blocks_of(chunk));
            assert_eq!(f.len().unwrap(), w.next_block * BLOCK as u64);
        }
        let back = read(&*f).unwrap();
        assert_eq!(back.epoch, Some(7));
        assert_eq!(back.ops, all);
        assert_eq!(back.next_block, w.next_block);
        assert_eq!(w.entries, 5_000);
        assert_eq!(w.weight(), 5_000 * FIXED_ENTRY as u64);
        w.reset(&*f, 8).unwrap();
        assert_eq!((w.entries, w.weight()), (0, BLOCK as u64));
        // Commits of one entry each take a block each.
        for op in &all[..20] {
            w.push(*op);
            w.commit(&*f).unwrap();
        }
        assert_eq!(w.weight(), 21 * BLOCK as u64);
    }

    /// Entries pushed across many pieces, with a run put before them, commit in that
    /// order; the pieces are never grown, and a commit keeps one piece's room only.
    #[test]
    fn pending_entries_in_pieces_keep_their_order() {
        let all = ops(3 * PIECE as u64 + 17);
        let (first, rest) = all.split_at(PIECE / 2);
        let (_vfs, f, mut w) = fresh_log(3, 7);
        rest.iter().for_each(|&op| w.push(op));
        assert!(w.pending.iter().all(|p| p.capacity() == PIECE));
        w.prepend(first.to_vec());
        w.prepend(Vec::new());
        assert_eq!(w.pending(), all.len());
        w.commit(&*f).unwrap();
        assert_eq!(read(&*f).unwrap().ops, all);
        assert_eq!(w.pending(), 0);
        assert!(w.pending.len() <= 1);
        // Only a put-before run pending: pushes after it go on in order.
        w.prepend(all[..3].to_vec());
        all[3..10].iter().for_each(|&op| w.push(op));
        w.commit(&*f).unwrap();
        assert_eq!(read(&*f).unwrap().ops, [&all[..], &all[..10]].concat());
    }

    #[test]
    fn a_commit_written_in_pieces_reads_back_whole_or_not_at_all() {
        // Two and a half writes' worth of blocks, after a small commit.
        let all = ops(100 + 165_000);
        let blocks = blocks_of(&all[100..]);
        let writes = blocks.div_ceil(WRITE_BLOCKS as u64);
        assert_eq!(writes, 3, "{blocks} blocks");
        let (_vfs, f, mut w) = fresh_log(5, 2);
        all.iter().for_each(|&op| w.push(op));
        w.commit(&*f).unwrap();
        assert_eq!(f.len().unwrap(), w.next_block * BLOCK as u64);
        assert_eq!(read(&*f).unwrap().ops, all);
        assert!(w.pending.len() <= 1 && w.pending_len == 0);
        assert!(w
            .pending
            .iter()
            .all(|p| p.is_empty() && p.capacity() == PIECE));
        for seed in 0..12 {
            let (vfs, f, mut w) = fresh_log(seed, 4);
            all[..100].iter().for_each(|&op| w.push(op));
            w.commit(&*f).unwrap();
            all[100..].iter().for_each(|&op| w.push(op));
            // Three writes happen; the sync after them fails.
            vfs.fail_after(4);
            assert!(w.commit(&*f).is_err());
            vfs.crash(CrashMode::CONCRETE[seed as usize % 3]);
            let f = vfs.open(Path::new("/s/log"), OpenMode::Existing).unwrap();
            let back = read(&*f).unwrap();
            assert!(
                back.ops == all || back.ops == all[..100],
                "seed {seed}: {} entries read",
                back.ops.len()
            );
        }
    }

    #[test]
    fn a_torn_or_damaged_block_ends_the_log() {
        let all = ops(4_000);
        let (first, second) = (blocks_of(&all[..1_500]), blocks_of(&all[1_500..]));
        assert!(second >= 3, "the second commit has a middle block");
        for seed in 0..40 {
            let (vfs, f, mut w) = fresh_log(seed, 3);
            all[..1_500].iter().for_each(|&op| w.push(op));
            w.commit(&*f).unwrap();
            all[1_500..].iter().for_each(|&op| w.push(op));
            // The second commit's write is torn by the crash (its sync never happened).
            vfs.fail_after(2); // the write happens, its sync fails
            assert!(w.commit(&*f).is_err());
            vfs.crash(CrashMode::TearLastWrite);
            let f = vfs.open(Path::new("/s/log"), OpenMode::Existing).unwrap();
            let back = read(&*f).unwrap();
            // The second commit is kept whole or not at all.
            assert!(
                back.ops == all || back.ops == all[..1_500],
                "seed {seed}: {} entries read",
                back.ops.len()
            );
            let next = 1 + first + if back.ops == all { second } else { 0 };
            assert_eq!(back.next_block, next, "seed {seed}");
            assert!(f.len().unwrap() <= (1 + first + second) * BLOCK as u64);
        }
        // A flipped byte in a commit's middle block drops the commit, though its
        // first block is sound; the commit before it stays.
        let (vfs, f, mut w) = fresh_log(9, 1);
        all[..1_500].iter().for_each(|&op| w.push(op));
        w.commit(&*f).unwrap();
        all[1_500..].iter().for_each(|&op| w.push(op));
        w.commit(&*f).unwrap();
        let path = PathBuf::from("/s/log");
        let mut bytes = vfs.contents(&path).unwrap();
        bytes[(first as usize + 2) * BLOCK + 100] ^= 1;
        vfs.set_contents(&path, bytes).unwrap();
        let back = read(&*f).unwrap();
        assert_eq!(back.ops, all[..1_500]);
        assert_eq!(
            back.next_block,
            1 + first,
            "the next commit goes where the dropped one began"
        );
    }

    #[test]
    fn a_reset_torn_by_a_crash_reads_as_an_empty_log() {
        let (vfs, f, mut w) = fresh_log(4, 1);
        ops(50).into_iter().for_each(|op| w.push(op));
        w.commit(&*f).unwrap();
        vfs.fail_after(3); // truncate and header write happen; the sync fails
        assert!(w.reset(&*f, 2).is_err());
        vfs.crash(CrashMode::KeepPrefix);
        let f = vfs.open(Path::new("/s/log"), OpenMode::Existing).unwrap();
        let back = read(&*f).unwrap();
        // Either the old log survived whole, or the new empty one, or nothing valid.
        match back.epoch {
            Some(1) => assert_eq!(back.ops, ops(50)),
            Some(2) | None => assert!(back.ops.is_empty()),
            other => panic!("unexpected epoch {other:?}"),
        }
    }

    #[test]
    fn a_newer_version_is_refused() {
        let vfs = FaultVfs::new(5);
        let f = open(&vfs);
        let mut h = header(1);
        h[8..12].copy_from_slice(&(VERSION + 1).to_le_bytes());
        let crc = crate::checksum::crc32c(&h[..24]);
        h[24..28].copy_from_slice(&crc.to_le_bytes());
        f.write_at(&h, 0).unwrap();
        assert!(matches!(
            read(&*f),
            Err(Error::Corruption { offset: 8, .. })
        ));
    }

    /// Logs of versions 1 and 2 read with their fixed entries: in version 2 a commit
    /// spans blocks, in version 1 every block is a commit of its own.
    #[test]
    fn logs_of_versions_1_and_2_read_with_their_fixed_entries() {
        let all = ops(300);
        for version in [1, 2] {
            let vfs = FaultVfs::new(6);
            let f = open(&vfs);
            write_fixed(&*f, 4, version, &all);
            let back = read(&*f).unwrap();
            assert_eq!((back.epoch, back.version), (Some(4), version));
            assert_eq!((&back.ops, back.next_block), (&all, 4));
            // A damaged third block: version 1 keeps the two blocks before it, version
            // 2 drops the whole commit.
            let path = PathBuf::from("/s/log");
            let mut bytes = vfs.contents(&path).unwrap();
            bytes[3 * BLOCK + 100] ^= 1;
            vfs.set_contents(&path, bytes).unwrap();
            let kept = if version == 1 { 2 * FIXED_PER_BLOCK } else { 0 };
            assert_eq!(read(&*f).unwrap().ops, all[..kept], "version {version}");
        }
        // An entry of a kind version 2 did not know is corruption, at its offset.
        let vfs = FaultVfs::new(7);
        let f = open(&vfs);
        write_fixed(&*f, 4, 2, &all[..3]);
        let path = PathBuf::from("/s/log");
        let mut bytes = vfs.contents(&path).unwrap();
        let at = BLOCK + BLOCK_HEAD + FIXED_ENTRY;
        bytes[at] = 9;
        let crc = crate::checksum::crc32c(&bytes[BLOCK + 4..2 * BLOCK]);
        bytes[BLOCK..BLOCK + 4].copy_from_slice(&crc.to_le_bytes());
        vfs.set_contents(&path, bytes).unwrap();
        assert!(matches!(
            read(&*f),
            Err(Error::Corruption { offset, .. }) if offset == at as u64
        ));
    }
}

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
//!   number, then up to [`ENTRIES_PER_BLOCK`] entries of [`ENTRY_SIZE`] bytes.
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
use crate::le::{get_u32 as get32, get_u64 as get, put_u64 as put};
use crate::{Error, Result};

pub(crate) const BLOCK: usize = 4096;
const MAGIC: &[u8; 8] = b"FLXSLOG1";
/// Version 2 added [`CONTINUED`]; a version-1 log (no block carries it) reads as before,
/// every block a commit of its own.
pub(crate) const VERSION: u32 = 2;
pub(crate) const ENTRY_SIZE: usize = 40;
const BLOCK_HEAD: usize = 16;
pub(crate) const ENTRIES_PER_BLOCK: usize = (BLOCK - BLOCK_HEAD) / ENTRY_SIZE;
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

impl LogOp {
    pub(crate) fn encode(&self, out: &mut [u8]) {
        out[..ENTRY_SIZE].fill(0);
        let (op, tag, a, b, c, d) = match *self {
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
        out[0] = op;
        out[1] = tag;
        put(out, 8, a);
        put(out, 16, b);
        put(out, 24, c);
        put(out, 32, d);
    }

    /// Decodes one entry; `None` for an operation code this version does not know.
    pub(crate) fn decode(buf: &[u8]) -> Option<LogOp> {
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
        let valid = crate::checksum::crc32c(&block[4..]) == get32(&block, 0)
            && get(&block, 8) == n
            && count <= ENTRIES_PER_BLOCK;
        if !valid {
            break;
        }
        for i in 0..count {
            let at = BLOCK_HEAD + i * ENTRY_SIZE;
            let op = LogOp::decode(&block[at..at + ENTRY_SIZE]).ok_or_else(|| {
                Error::corruption(
                    file.path(),
                    n * BLOCK as u64 + at as u64,
                    "unknown log operation",
                )
            })?;
            ops.push(op);
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
    /// Bytes written to the log file, for write amplification.
    pub bytes_written: u64,
}

impl LogWriter {
    /// A writer that continues after `next_block`.
    pub(crate) fn new(next_block: u64) -> Self {
        LogWriter {
            next_block,
            pending: Vec::new(),
            pending_len: 0,
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

    /// Bytes the log file will hold after the next commit.
    pub(crate) fn size_after_commit(&self) -> u64 {
        let blocks = self.pending_len.div_ceil(ENTRIES_PER_BLOCK) as u64;
        (self.next_block + blocks) * BLOCK as u64
    }

    /// Writes the pending entries as new blocks and syncs the file. On failure nothing
    /// is forgotten: the entries stay pending (the caller poisons the space anyway).
    ///
    /// The blocks are encoded and written [`WRITE_BLOCKS`] at a time: a commit of a
    /// whole memtable logs hundreds of thousands of entries, and one buffer for all of
    /// them was 20 MiB more at the commit's peak. Recovery reads a commit as whole only
    /// once its last block is there, so writing it in pieces before the one sync
    /// changes nothing a crash can leave.
    pub(crate) fn commit(&mut self, file: &dyn VfsFile) -> Result<()> {
        if self.pending_len == 0 {
            return Ok(());
        }
        let blocks = self.pending_len.div_ceil(ENTRIES_PER_BLOCK);
        let mut buf = Vec::with_capacity(blocks.min(WRITE_BLOCKS) * BLOCK);
        // The block number of `buf`'s first block.
        let mut first = self.next_block;
        let mut ops = self.pending.iter().flatten();
        for i in 0..blocks {
            let count = ENTRIES_PER_BLOCK.min(self.pending_len - i * ENTRIES_PER_BLOCK);
            let at = buf.len();
            buf.resize(at + BLOCK, 0);
            let block = &mut buf[at..];
            let more = if i + 1 < blocks { CONTINUED } else { 0 };
            block[4..8].copy_from_slice(&(count as u32 | more).to_le_bytes());
            put(block, 8, self.next_block + i as u64);
            for (j, op) in ops.by_ref().take(count).enumerate() {
                let at = BLOCK_HEAD + j * ENTRY_SIZE;
                op.encode(&mut block[at..at + ENTRY_SIZE]);
            }
            let crc = crate::checksum::crc32c(&block[4..]);
            block[..4].copy_from_slice(&crc.to_le_bytes());
            if buf.len() == WRITE_BLOCKS * BLOCK || i + 1 == blocks {
                file.write_at(&buf, first * BLOCK as u64)?;
                first += (buf.len() / BLOCK) as u64;
                buf.clear();
            }
        }
        file.sync()?;
        self.bytes_written += (blocks * BLOCK) as u64;
        self.next_block += blocks as u64;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::{CrashMode, FaultVfs, OpenMode, Vfs};
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    fn ops(n: u64) -> Vec<LogOp> {
        (0..n)
            .map(|i| match i % 5 {
                0 => LogOp::Insert {
                    off: i,
                    len: i + 1,
                    addr: i * 7,
                },
                1 => LogOp::Collapse { off: i, len: 3 },
                2 => LogOp::Overwrite {
                    off: i,
                    len: 9,
                    addr: u64::MAX >> 9,
                },
                3 => LogOp::Remap {
                    off: i,
                    len: 2,
                    old: 5,
                    new: 6,
                },
                4 if i % 2 == 0 => LogOp::BlockSum {
                    block: i,
                    fill: 4096,
                    crc: u32::MAX - i as u32,
                },
                4 if i % 3 == 0 => LogOp::InsertHole {
                    off: i,
                    len: 1 << 40,
                },
                _ => LogOp::Tag {
                    off: i,
                    tag: (i % 256) as u8,
                },
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
        let mut w = LogWriter::new(1);
        w.reset(&*f, epoch).unwrap();
        (vfs, f, w)
    }

    #[test]
    fn every_entry_kind_round_trips() {
        for op in ops(10) {
            let mut buf = [0u8; ENTRY_SIZE];
            op.encode(&mut buf);
            assert_eq!(LogOp::decode(&buf), Some(op));
        }
        assert_eq!(LogOp::decode(&[9u8; ENTRY_SIZE]), None);
    }

    #[test]
    fn commits_append_blocks_that_read_back_in_order() {
        let (_vfs, f, mut w) = fresh_log(1, 7);
        let all = ops(500);
        for chunk in all.chunks(130) {
            chunk.iter().for_each(|&op| w.push(op));
            let expected = w.size_after_commit();
            w.commit(&*f).unwrap();
            assert_eq!(f.len().unwrap(), expected);
        }
        let back = read(&*f).unwrap();
        assert_eq!(back.epoch, Some(7));
        assert_eq!(back.ops, all);
        assert_eq!(back.next_block, w.next_block);
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
        // Two and a half pieces' worth of blocks, after a small commit.
        let big = (2 * WRITE_BLOCKS + WRITE_BLOCKS / 2) * ENTRIES_PER_BLOCK;
        let all = ops(100 + big as u64);
        let (_vfs, f, mut w) = fresh_log(5, 2);
        all.iter().for_each(|&op| w.push(op));
        let expected = w.size_after_commit();
        w.commit(&*f).unwrap();
        assert_eq!(f.len().unwrap(), expected);
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
        for seed in 0..40 {
            let (vfs, f, mut w) = fresh_log(seed, 3);
            let all = ops(400);
            all[..150].iter().for_each(|&op| w.push(op));
            w.commit(&*f).unwrap();
            all[150..].iter().for_each(|&op| w.push(op));
            // The second commit's write is torn by the crash (its sync never happened).
            let buf_len = w.size_after_commit();
            vfs.fail_after(2); // the write happens, its sync fails
            assert!(w.commit(&*f).is_err());
            vfs.crash(CrashMode::TearLastWrite);
            let f = vfs.open(Path::new("/s/log"), OpenMode::Existing).unwrap();
            let back = read(&*f).unwrap();
            // The second commit (three blocks) is kept whole or not at all.
            assert!(
                back.ops == all || back.ops == all[..150],
                "seed {seed}: {} entries read",
                back.ops.len()
            );
            // Blocks 1–2 hold the first commit, 3–5 the second.
            let next = if back.ops == all { 6 } else { 3 };
            assert_eq!(back.next_block, next, "seed {seed}");
            assert!(f.len().unwrap() <= buf_len);
        }
        // A flipped byte in a commit's middle block drops the commit, though its
        // first block is sound; the commit before it stays.
        let (vfs, f, mut w) = fresh_log(9, 1);
        let all = ops(400);
        all[..100].iter().for_each(|&op| w.push(op));
        w.commit(&*f).unwrap();
        all[100..].iter().for_each(|&op| w.push(op));
        w.commit(&*f).unwrap();
        let path = PathBuf::from("/s/log");
        let mut bytes = vfs.contents(&path).unwrap();
        bytes[3 * BLOCK + 100] ^= 1;
        vfs.set_contents(&path, bytes).unwrap();
        let back = read(&*f).unwrap();
        assert_eq!(back.ops, all[..100]);
        assert_eq!(
            back.next_block, 2,
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

    #[test]
    fn a_version_1_log_reads_every_block_as_a_commit() {
        let (vfs, f, mut w) = fresh_log(6, 4);
        // Commits of one block each carry no continuation bit, as version 1 wrote them.
        let all = ops(300);
        for chunk in all.chunks(ENTRIES_PER_BLOCK) {
            chunk.iter().for_each(|&op| w.push(op));
            w.commit(&*f).unwrap();
        }
        let mut h = header(4);
        h[8..12].copy_from_slice(&1u32.to_le_bytes());
        let crc = crate::checksum::crc32c(&h[..24]);
        h[24..28].copy_from_slice(&crc.to_le_bytes());
        f.write_at(&h, 0).unwrap();
        let back = read(&*f).unwrap();
        assert_eq!((back.epoch, back.ops.len()), (Some(4), 300));
        // A damaged third block keeps the two before it.
        let path = PathBuf::from("/s/log");
        let mut bytes = vfs.contents(&path).unwrap();
        bytes[3 * BLOCK + 100] ^= 1;
        vfs.set_contents(&path, bytes).unwrap();
        assert_eq!(read(&*f).unwrap().ops, all[..2 * ENTRIES_PER_BLOCK]);
    }
}

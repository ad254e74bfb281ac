//! The data file of a FlexSpace: fixed-size segments written log-structured (FlexSpace
//! §4.1).
//!
//! New data goes into the *open* segment through an in-memory buffer that holds the
//! segment from its start; `flush` writes what the file does not have yet. Each segment's
//! live bytes (bytes some extent still maps) are counted exactly. A segment whose live
//! count falls to zero is not reused at once: the log records that freed it must be
//! durable first, or a crash could bring back a tree that still maps it. Such a segment
//! waits as `Freeing` until [`Segments::log_committed`], and as `Held` after that while
//! a [`SpaceView`](super::SpaceView) of an earlier tree may still read it.

use std::sync::Arc;

use super::crc::{self, BlockSum};
use crate::io::{VfsFile, WRITEBACK_EVERY};
use crate::Result;

/// A segment's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum State {
    /// Unused: may become the open segment.
    Free,
    /// The segment new data is appended to.
    Open,
    /// Holds data; may be garbage-collected.
    Used,
    /// Holds no live data, but the log records that freed it are not durable yet.
    Freeing,
    /// Freed and durably so, but a view made before it was freed may still read it:
    /// it is neither reused nor punched out until no view is left.
    Held,
}

pub(crate) struct Segments {
    pub size: u64,
    pub live: Vec<u64>,
    pub state: Vec<State>,
    /// The sum of `live`, and how many segments are `Free`: kept as they change, because
    /// every write asks for them and the table may hold hundreds of thousands of segments.
    live_total: u64,
    free: usize,
    /// How many segments are `Held`.
    held: usize,
    /// The open segment and its content from the segment's start.
    open: Option<u64>,
    buf: Vec<u8>,
    /// How much of `buf` the file already has.
    flushed: usize,
    /// Segments that became free since the last punch (their space can be returned),
    /// in a mutex (never contended: only the space's writer takes it) so that the
    /// punches may run with shared access, beside readers ([`Segments::punch_freed`]).
    to_punch: parking_lot::Mutex<Vec<u64>>,
    /// How much of `buf` has its block checksums taken (the block holding this point is
    /// taken again next time, as it may have grown).
    summed: usize,
    /// Block checksums taken and not yet handed to the table and the log.
    sums: Vec<(u64, BlockSum)>,
    /// How many times each segment was opened: bytes written to a segment stay as they
    /// are until it is opened again, so a read of its bytes is still good if this has
    /// not changed (see [`Spot`](super::Spot)).
    opened: Vec<u32>,
    /// The data file's length: what it was at open, or the end of the furthest write
    /// since (the file is never truncated; freed segments are punched out, which keeps
    /// the length).
    file_len: u64,
    /// Bytes of the data file written whose write-back was not started yet, as one
    /// range ([`Segments::wrote`]): a commit ends with the data file's sync, which
    /// then finds most of what the commit wrote on its way to the device.
    unstarted: std::ops::Range<u64>,
}

impl Segments {
    /// The table for a data file of `file_len` bytes whose live bytes per segment are
    /// `live` (computed from the tree).
    pub(crate) fn new(size: u64, file_len: u64, mut live: Vec<u64>) -> Segments {
        let count = file_len.div_ceil(size).max(live.len() as u64) as usize;
        live.resize(count, 0);
        let state: Vec<State> = live
            .iter()
            .map(|&l| if l > 0 { State::Used } else { State::Free })
            .collect();
        Segments {
            size,
            live_total: live.iter().sum(),
            free: state.iter().filter(|&&s| s == State::Free).count(),
            held: 0,
            live,
            state,
            open: None,
            buf: Vec::new(),
            flushed: 0,
            to_punch: parking_lot::Mutex::new(Vec::new()),
            summed: 0,
            sums: Vec::new(),
            opened: vec![0; count],
            file_len,
            unstarted: 0..0,
        }
    }

    /// The data file's length (see the field).
    pub(crate) fn file_len(&self) -> u64 {
        self.file_len
    }

    pub(crate) fn of(&self, addr: u64) -> usize {
        (addr / self.size) as usize
    }

    /// Room left in the open segment (0 if none is open).
    pub(crate) fn room(&self) -> u64 {
        match self.open {
            Some(_) => self.size - self.buf.len() as u64,
            None => 0,
        }
    }

    /// Segments in use or reserved, and how many there are in all.
    pub(crate) fn count(&self) -> usize {
        self.live.len()
    }

    pub(crate) fn free_count(&self) -> usize {
        self.free
    }

    /// Makes a free (or a new) segment the open one; the caller has flushed and closed
    /// the previous one. Returns the segment.
    pub(crate) fn open_next(&mut self) -> u64 {
        debug_assert!(self.open.is_none());
        let seg = match self.state.iter().position(|&s| s == State::Free) {
            Some(s) => {
                self.free -= 1;
                s
            }
            None => {
                self.live.push(0);
                self.state.push(State::Free);
                self.opened.push(0);
                self.live.len() - 1
            }
        };
        self.opened[seg] = self.opened[seg].wrapping_add(1);
        self.state[seg] = State::Open;
        self.open = Some(seg as u64);
        self.buf.clear();
        self.flushed = 0;
        self.summed = 0;
        seg as u64
    }

    /// Appends to the open segment (which has room for all of `data`); returns the
    /// physical address written.
    pub(crate) fn append(&mut self, data: &[u8]) -> u64 {
        let seg = self.open.expect("an open segment");
        debug_assert!(data.len() as u64 <= self.room());
        let addr = seg * self.size + self.buf.len() as u64;
        self.buf.extend_from_slice(data);
        addr
    }

    /// Bytes of the open segment the file does not have yet.
    pub(crate) fn unflushed(&self) -> usize {
        self.buf.len() - self.flushed
    }

    /// Writes the part of the open segment the file does not have yet.
    pub(crate) fn flush(&mut self, file: &dyn VfsFile) -> Result<u64> {
        let Some(seg) = self.open else { return Ok(0) };
        let new = &self.buf[self.flushed..];
        if new.is_empty() {
            return Ok(0);
        }
        let at = seg * self.size + self.flushed as u64;
        let len = new.len() as u64;
        file.write_at(new, at)?;
        self.flushed = self.buf.len();
        self.file_len = self.file_len.max(at + len);
        self.wrote(file, at, len);
        Ok(len)
    }

    /// Notes `len` bytes written at `at`, and starts the write-back of what was written
    /// once [`WRITEBACK_EVERY`] bytes of it lie end to end, or when a write lands
    /// elsewhere (another segment opened).
    fn wrote(&mut self, file: &dyn VfsFile, at: u64, len: u64) {
        if self.unstarted.end != at {
            self.start_writeback(file);
            self.unstarted = at..at;
        }
        self.unstarted.end += len;
        if self.unstarted.end - self.unstarted.start >= WRITEBACK_EVERY {
            self.start_writeback(file);
        }
    }

    fn start_writeback(&mut self, file: &dyn VfsFile) {
        let end = self.unstarted.end;
        let r = std::mem::replace(&mut self.unstarted, end..end);
        if !r.is_empty() {
            file.start_writeback(r.start, r.end - r.start);
        }
    }

    /// Takes the checksums of the open segment's blocks written since the last call.
    pub(crate) fn take_sums(&mut self) -> Vec<(u64, BlockSum)> {
        if let Some(seg) = self.open {
            let first = self.summed as u64 / crc::BLOCK;
            let blocks_per_segment = self.size / crc::BLOCK;
            let mut at = first * crc::BLOCK;
            while (at as usize) < self.buf.len() {
                let end = (at + crc::BLOCK).min(self.buf.len() as u64);
                let block = seg * blocks_per_segment + at / crc::BLOCK;
                self.sums
                    .push((block, crc::sum(&self.buf[at as usize..end as usize])));
                at = end;
            }
            self.summed = self.buf.len();
        }
        std::mem::take(&mut self.sums)
    }

    /// Flushes and closes the open segment (it becomes `Used`, or `Freeing` if everything
    /// in it was already removed), keeping its last block checksums for the next commit.
    pub(crate) fn close_open(&mut self, file: &dyn VfsFile) -> Result<u64> {
        let sums = self.take_sums();
        self.sums = sums;
        let written = self.flush(file)?;
        if let Some(seg) = self.open.take() {
            let seg = seg as usize;
            self.state[seg] = if self.live[seg] > 0 {
                State::Used
            } else {
                State::Freeing
            };
            self.buf.clear();
            self.flushed = 0;
        }
        Ok(written)
    }

    /// Copies bytes at `addr` from the open segment's buffer, if they are there.
    pub(crate) fn read_buffered(&self, addr: u64, out: &mut [u8]) -> bool {
        let Some(seg) = self.open else { return false };
        let start = seg * self.size;
        if addr < start || addr + out.len() as u64 > start + self.buf.len() as u64 {
            return false;
        }
        let at = (addr - start) as usize;
        out.copy_from_slice(&self.buf[at..at + out.len()]);
        true
    }

    /// How many times segment `seg` has been opened.
    pub(crate) fn opened(&self, seg: usize) -> u32 {
        self.opened.get(seg).copied().unwrap_or(0)
    }

    /// Whether segment `seg` still holds what it held when it had been opened `opened`
    /// times: it has not been opened since, nor freed (a free segment is punched out).
    pub(crate) fn holds(&self, seg: usize, opened: u32) -> bool {
        self.opened(seg) == opened && self.state.get(seg).is_some_and(|&s| s != State::Free)
    }

    /// The part of `[addr, addr + len)` in each segment of `size` bytes, as `(segment,
    /// bytes)`, borrowing nothing, so the callers change the counts as they go: every
    /// insert and collapse of the space counts its bytes here, and collecting the parts
    /// in a vector first was an allocation each time.
    fn per_segment(size: u64, addr: u64, len: u64) -> impl Iterator<Item = (usize, u64)> {
        let (mut addr, mut len) = (addr, len);
        std::iter::from_fn(move || {
            if len == 0 {
                return None;
            }
            let seg = (addr / size) as usize;
            let n = len.min((addr / size + 1) * size - addr);
            addr += n;
            len -= n;
            Some((seg, n))
        })
    }

    pub(crate) fn add_live(&mut self, addr: u64, len: u64) {
        for (seg, n) in Self::per_segment(self.size, addr, len) {
            self.live[seg] += n;
            self.live_total += n;
        }
    }

    pub(crate) fn remove_live(&mut self, addr: u64, len: u64) {
        for (seg, n) in Self::per_segment(self.size, addr, len) {
            self.live[seg] = self.live[seg]
                .checked_sub(n)
                .expect("live byte count of a segment went negative");
            self.live_total -= n;
            if self.live[seg] == 0 && self.state[seg] == State::Used {
                self.state[seg] = State::Freeing;
            }
        }
    }

    /// The log records that freed the `Freeing` segments are durable: they become free,
    /// and so do the `Held` ones, unless `hold` (a view of the space may still read
    /// them), when the `Freeing` ones are held too.
    pub(crate) fn log_committed(&mut self, hold: bool) {
        if hold {
            for s in self.state.iter_mut().filter(|s| **s == State::Freeing) {
                *s = State::Held;
                self.held += 1;
            }
            return;
        }
        for (seg, s) in self.state.iter_mut().enumerate() {
            if matches!(*s, State::Freeing | State::Held) {
                *s = State::Free;
                self.free += 1;
                self.to_punch.get_mut().push(seg as u64);
            }
        }
        self.held = 0;
    }

    /// How many segments are `Held`: free once no view is left.
    pub(crate) fn held_count(&self) -> usize {
        self.held
    }

    /// The open segment's bytes that the file does not have yet, and their address.
    pub(crate) fn unflushed_bytes(&self) -> Option<(u64, Vec<u8>)> {
        let seg = self.open?;
        Some((
            seg * self.size + self.flushed as u64,
            self.buf[self.flushed..].to_vec(),
        ))
    }

    /// Returns the disk space of segments freed since the last call. A segment is
    /// punched only while it is free: one punched after the writer had put new data in
    /// it would lose that data, so the writer punches them (this, or a change, which
    /// punches first: [`Segments::punch_pending`]) before it writes again. Readers may
    /// run beside it, as they read no free segment (a [`Spot`](super::Spot) checks the
    /// segment's state). On an error the segments not yet punched are kept for the
    /// next call.
    pub(crate) fn punch_freed(&self, file: &Arc<dyn VfsFile>) -> Result<()> {
        let mut to_punch = self.to_punch.lock();
        while let Some(&seg) = to_punch.last() {
            if self.state[seg as usize] == State::Free {
                file.punch_hole(seg * self.size, self.size)?;
            }
            to_punch.pop();
        }
        Ok(())
    }

    /// Whether segments freed wait for [`Segments::punch_freed`].
    pub(crate) fn punch_pending(&mut self) -> bool {
        !self.to_punch.get_mut().is_empty()
    }

    /// Live bytes in all, and bytes the data file's segments occupy.
    /// Recomputes the kept totals from the table: `Err` if they drifted.
    pub(crate) fn check(&self) -> Result<(), String> {
        let live: u64 = self.live.iter().sum();
        let free = self.state.iter().filter(|&&s| s == State::Free).count();
        let held = self.state.iter().filter(|&&s| s == State::Held).count();
        if (live, free, held) != (self.live_total, self.free, self.held) {
            return Err(format!(
                "segment totals drifted: live {} (table {live}), free {} (table {free}), \
                 held {} (table {held})",
                self.live_total, self.free, self.held
            ));
        }
        Ok(())
    }

    pub(crate) fn totals(&self) -> (u64, u64) {
        let used = (self.state.len() - self.free) as u64 * self.size;
        (self.live_total, used)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::io::{FaultVfs, OpenMode, Vfs};

    const MIB: u64 = 1 << 20;

    /// Appends `bytes` to the open segment 64 KiB at a time, flushing after each piece
    /// (as the space does every `WRITE_BEHIND` bytes).
    fn fill(segs: &mut Segments, file: &dyn VfsFile, bytes: u64) {
        let piece = [7u8; 64 << 10];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(piece.len() as u64) as usize;
            segs.append(&piece[..n]);
            segs.flush(file).unwrap();
            left -= n as u64;
        }
    }

    #[test]
    fn write_back_starts_every_few_mebibytes_and_where_writes_jump() {
        let vfs = FaultVfs::new(1);
        vfs.create_dir_all(Path::new("/db")).unwrap();
        let path = Path::new("/db/data");
        let file = vfs.open(path, OpenMode::CreateNew).unwrap();
        // Segments of 1 MiB, all holding data but the second.
        let mut live = vec![1; 8];
        live[1] = 0;
        let mut segs = Segments::new(MIB, 8 * MIB, live);
        assert_eq!(segs.open_next(), 1);
        fill(&mut segs, &*file, MIB);
        assert_eq!(vfs.writebacks(path), [], "1 MiB end to end waits for more");
        segs.close_open(&*file).unwrap();
        // No segment is free now: the next one is new, at the file's end, so the
        // writes jump, and what lay end to end before the jump is started first.
        assert_eq!(segs.open_next(), 8);
        fill(&mut segs, &*file, 64 << 10);
        assert_eq!(vfs.writebacks(path), [(MIB, MIB)]);
        fill(&mut segs, &*file, MIB - (64 << 10));
        for seg in 9..=12 {
            segs.close_open(&*file).unwrap();
            assert_eq!(segs.open_next(), seg);
            fill(&mut segs, &*file, MIB);
        }
        // Segments 8 to 12 lie end to end: their first WRITEBACK_EVERY bytes are
        // started once they are written, the last MiB waits.
        assert_eq!(WRITEBACK_EVERY, 4 * MIB);
        assert_eq!(vfs.writebacks(path), [(MIB, MIB), (8 * MIB, 4 * MIB)]);
        assert_eq!(vfs.contents(path).unwrap().len() as u64, 13 * MIB);
    }
}

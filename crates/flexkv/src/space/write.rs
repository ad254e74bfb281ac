//! Changing a FlexSpace: writes, inserts, collapses and tags; `sync` and checkpoints
//! (Figure 9); garbage collection and defragmentation (§4.1).
//!
//! Every change to the index is one [`LogOp`], applied by the same function replay uses
//! and accounted in the segments' live bytes here. Any failed I/O poisons the space:
//! what reached the disk is then unknown, so further changes are refused until it is
//! reopened (which recovers from what is durable).

use super::log::LogOp;
use super::segments::State;
use super::treefile::TreeFile;
use super::{apply, BlockReader, FlexSpace};
use crate::flextree::MAX_LEN;
use crate::{Error, Result};

/// With `log_grows_with_tree`, the log's entries grow to this many times the bytes of
/// the tree's last checkpoint before the next one. Scattered changes dirty most of a
/// large tree between checkpoints, so each rewrote nearly all of it: with 1, the tree's
/// checkpoints wrote 0.47 times the user bytes of a 10M random load; with 2, about 0.26
/// (the drop in the load's write amplification, 4.20 to 3.99), and a replay after a
/// crash applies at most twice as many entries.
const LOG_TREES: u64 = 2;

/// How many free segments a size-limited space keeps for garbage collection to write
/// into; ordinary writes never take them.
const GC_RESERVE: usize = 2;

/// Whether the `len` bytes (at least one) at `addr` touch a segment that `marked` marks
/// (segments of `1 << shift` bytes; segments past its end are not marked).
fn touches(marked: &[bool], shift: u32, addr: u64, len: u64) -> bool {
    let is = |g: u64| marked.get(g as usize).copied().unwrap_or(false);
    let (first, last) = (addr >> shift, (addr + len - 1) >> shift);
    // An extent is at most a quarter segment, so it lies in one segment or two; the
    // range is there for anything longer.
    is(first) || is(last) || (first + 1..last).any(is)
}

/// The most segments one GC pass frees. A pass walks every extent of the space to
/// find the victims' (about 0.2 s at 3M extents when each extent was tested against
/// every victim's range; its share of a load's time halved since it is tested by its
/// segments), so taking more at once spreads that walk: a 10M-pair load ran 25 passes
/// instead of 98 at 16 against 4, relocating a seventh more bytes (the extra victims
/// are a little fuller), and loaded 1.04–1.18× faster (two alternating runs each,
/// docs/benchmarks.md).
const GC_VICTIMS: usize = 16;

/// The open segment is written to the file in steps of this size as it fills. Handing the
/// kernel a whole segment at once made it copy bytes long gone from the CPU caches: 64
/// KiB writes ran at 0.5x of plain pwrite (measured by paper-flexspace --block-kib 64).
const WRITE_BEHIND: usize = 64 << 10;

impl FlexSpace {
    fn writable(&self) -> Result<()> {
        if self.poisoned {
            return Err(Error::Poisoned);
        }
        Ok(())
    }

    /// Runs `f`, poisoning the space if it fails after changing anything (an I/O error,
    /// or any error once it has recorded part of a change: the index is then ahead of a
    /// half-done operation, which must never reach the disk), or if it panics.
    fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.writable()?;
        // Segments a sync freed are punched before anything may write to them again.
        if self.segs.punch_pending() {
            self.punch_now()?;
        }
        self.changes += 1;
        let recorded = self.meta.get_mut().log.pending();
        // Poisoned while `f` runs, so a panic leaves the space poisoned, and a poisoned
        // space writes nothing more, not even when dropped. (Nothing `f` calls looks at
        // the flag.)
        self.poisoned = true;
        let r = f(self);
        self.poisoned = match &r {
            Ok(_) => false,
            Err(e) => {
                matches!(e, Error::Io { .. } | Error::Corruption { .. })
                    || self.meta.get_mut().log.pending() != recorded
            }
        };
        self.refresh_stats();
        r
    }

    /// Applies `op` to the index, accounts it in the segments and logs it.
    fn record(&mut self, op: LogOp) -> Result<()> {
        let mut runs = Vec::new();
        match op {
            LogOp::Collapse { off, len } => self.tree.query_into(off, len, &mut runs)?,
            LogOp::Overwrite { off, len, .. } => {
                let cut = len.min(self.tree.len().saturating_sub(off));
                self.tree.query_into(off, cut, &mut runs)?;
            }
            _ => {}
        }
        apply(&mut self.tree, op, self.opts.max_extent)?;
        for r in runs {
            if let Some(a) = r.addr {
                self.segs.remove_live(a, r.len);
            }
        }
        match op {
            LogOp::Insert { addr, len, .. } | LogOp::Overwrite { addr, len, .. } => {
                self.segs.add_live(addr, len)
            }
            LogOp::Remap { old, new, len, .. } => {
                self.segs.remove_live(old, len);
                self.segs.add_live(new, len);
            }
            _ => {}
        }
        self.meta.get_mut().log.push(op);
        Ok(())
    }

    /// Refuses, before anything changes, a change that would add `more` live bytes to a
    /// size-limited space beyond what its garbage collector can always make room for.
    fn check_limit(&self, more: u64) -> Result<()> {
        let Some(max) = self.opts.max_data_size else {
            return Ok(());
        };
        let k = self.opts.k();
        let usable = max / self.opts.segment_size * self.opts.segment_size;
        let cap = (usable - GC_RESERVE as u64 * self.opts.segment_size) / k * (k - 1);
        let live = self.segs.totals().0;
        if live + more > cap {
            return Err(Error::NoSpace(format!(
                "{live} live bytes + {more} would pass {cap}, the most a data file limited to {max} bytes can hold"
            )));
        }
        Ok(())
    }

    /// Before a change that appends `bytes` of data records anything: collects garbage if
    /// the used segments passed `gc_space_amplification` times the live bytes, and,
    /// under a size limit, until the change fits. Garbage collection syncs, so it must
    /// never run in the middle of a change (that would make half of it durable).
    fn make_room_for(&mut self, bytes: u64) -> Result<()> {
        let seg = self.opts.segment_size;
        if self.gc_due(0) {
            self.gc_pass_in_change()?;
        }
        let Some(max) = self.opts.max_data_size else {
            return Ok(());
        };
        let allowed = (max / seg) as usize;
        let needed = bytes.saturating_sub(self.segs.room()).div_ceil(seg) as usize;
        loop {
            let available = allowed.saturating_sub(self.segs.count()) + self.segs.free_count();
            if available >= needed + GC_RESERVE {
                return Ok(());
            }
            if self.gc_pass_in_change()? == 0 {
                return Err(Error::NoSpace(format!(
                    "{bytes} more bytes do not fit in a data file limited to {max} bytes"
                )));
            }
        }
    }

    /// [`FlexSpace::gc_pass`] from inside a change, counted apart.
    fn gc_pass_in_change(&mut self) -> Result<u64> {
        let passes = self.stats.gc_passes;
        let freed = self.gc_pass()?;
        self.stats.gc_passes_in_changes += self.stats.gc_passes - passes;
        Ok(freed)
    }

    /// Makes sure the open segment has room, opening a free (or new) segment.
    /// [`FlexSpace::make_room_for`] has made sure one exists.
    fn ensure_room(&mut self) -> Result<()> {
        if self.segs.room() > 0 {
            return Ok(());
        }
        self.stats.data_bytes_written += self.segs.close_open(&*self.data)?;
        self.fit_window();
        // The closed segment's data is read from the file from now on: its checksums go
        // into the table at once.
        self.absorb_sums();
        if let Some(max) = self.opts.max_data_size {
            let allowed = (max / self.opts.segment_size) as usize;
            if self.segs.count() >= allowed && self.segs.free_count() == 0 {
                return Err(Error::NoSpace(format!(
                    "no free segment left in {max} bytes"
                )));
            }
        }
        self.segs.open_next();
        Ok(())
    }

    /// Appends `data` to the log-structured data file in pieces no larger than an extent
    /// and never across a segment's end; `each(space, offset in data, addr, piece len)`
    /// records each piece.
    fn put_data(
        &mut self,
        data: &[u8],
        mut each: impl FnMut(&mut Self, u64, u64, u64) -> Result<()>,
    ) -> Result<()> {
        let mut done = 0usize;
        while done < data.len() {
            self.ensure_room()?;
            let n = (data.len() - done)
                .min(self.opts.max_extent as usize)
                .min(self.segs.room() as usize);
            let addr = self.segs.append(&data[done..done + n]);
            each(self, done as u64, addr, n as u64)?;
            done += n;
            if self.segs.unflushed() >= WRITE_BEHIND {
                self.flush_data()?;
            }
        }
        Ok(())
    }

    /// [`FlexSpace::check_limit`] for `new` bytes that replace `[off, off + old)`, whose
    /// mapped bytes (not holes) stop being live.
    fn check_limit_replacing(&self, off: u64, old: u64, new: u64) -> Result<()> {
        if self.opts.max_data_size.is_none() {
            return Ok(());
        }
        let end = off.saturating_add(old);
        let freed: u64 = self
            .tree
            .extents_from(off)
            .take_while(|e| e.offset < end)
            .filter(|e| e.addr.is_some())
            .map(|e| (e.offset + e.len).min(end) - e.offset.max(off))
            .sum();
        self.check_limit(new.saturating_sub(freed))
    }

    fn check_write(&self, what: &str, off: u64, grows: u64) -> Result<()> {
        if off > self.len() {
            return Err(Error::invalid(format!(
                "{what} at {off} is past the end of the space ({} bytes)",
                self.len()
            )));
        }
        if grows > MAX_LEN - self.len() {
            return Err(Error::invalid(format!(
                "{what} of {grows} bytes would grow the space past {MAX_LEN}"
            )));
        }
        Ok(())
    }

    /// Writes `data` over `[off, off + data.len())`, extending the space if it runs past
    /// the end. `off` must be inside the space or at its end.
    pub fn write(&mut self, off: u64, data: &[u8]) -> Result<()> {
        let grows = (off + data.len() as u64).saturating_sub(self.len());
        self.check_write("write", off, grows)?;
        // The bytes written over stop being live.
        self.check_limit_replacing(off, data.len() as u64, data.len() as u64)?;
        self.guarded(|s| {
            s.make_room_for(data.len() as u64)?;
            s.stats.user_bytes += data.len() as u64;
            s.put_data(data, |s, at, addr, len| {
                let off = off + at;
                // At the end, a write is an insert: it may then extend the last extent.
                let op = if off == s.len() {
                    LogOp::Insert { off, len, addr }
                } else {
                    LogOp::Overwrite { off, len, addr }
                };
                s.record(op)
            })
        })
    }

    /// Inserts `data` at `off` (inside the space or at its end), shifting every later
    /// byte forward by `data.len()`.
    pub fn insert(&mut self, off: u64, data: &[u8]) -> Result<()> {
        self.check_write("insert", off, data.len() as u64)?;
        self.check_limit(data.len() as u64)?;
        self.guarded(|s| {
            s.make_room_for(data.len() as u64)?;
            s.put_inserted(off, data)
        })
    }

    /// Appends `data` and records it as inserted at `off`.
    fn put_inserted(&mut self, off: u64, data: &[u8]) -> Result<()> {
        self.stats.user_bytes += data.len() as u64;
        self.put_data(data, |s, at, addr, len| {
            s.record(LogOp::Insert {
                off: off + at,
                len,
                addr,
            })
        })
    }

    /// Refuses a range that does not lie inside the space.
    fn check_inside(&self, what: &str, off: u64, len: u64) -> Result<()> {
        if off.checked_add(len).is_none_or(|end| end > self.len()) {
            return Err(Error::invalid(format!(
                "{what} of [{off}, {off}+{len}) is outside the space of {} bytes",
                self.len()
            )));
        }
        Ok(())
    }

    /// Removes `[off, off + len)` without leaving a hole: every later byte moves back.
    pub fn collapse(&mut self, off: u64, len: u64) -> Result<()> {
        self.check_inside("collapse", off, len)?;
        self.guarded(|s| s.record(LogOp::Collapse { off, len }))
    }

    /// Replaces the `old_len` bytes at `off` with `data`: a collapse and an insert, made
    /// as one change. Any garbage collection the insert needs runs before the collapse
    /// is recorded, so a GC pass's sync never makes the collapse durable without the
    /// insert (as it can between a [`FlexSpace::collapse`] and a
    /// [`FlexSpace::insert`]), and a sync keeps both or neither. Lengths that match are
    /// one overwrite ([`FlexSpace::write`]).
    pub fn replace(&mut self, off: u64, old_len: u64, data: &[u8]) -> Result<()> {
        self.check_inside("replace", off, old_len)?;
        if old_len == data.len() as u64 {
            return self.write(off, data);
        }
        let grows = (data.len() as u64).saturating_sub(old_len);
        self.check_write("replace", off, grows)?;
        // Under a size limit, what the collapse frees counts as it would between a
        // collapse and an insert made apart.
        self.check_limit_replacing(off, old_len, data.len() as u64)?;
        self.guarded(|s| {
            s.make_room_for(data.len() as u64)?;
            if old_len > 0 {
                s.record(LogOp::Collapse { off, len: old_len })?;
            }
            s.put_inserted(off, data)
        })
    }

    /// Sets the size of the space: growing adds an unmapped range (reads as zeros, takes
    /// no data space) at the end; shrinking removes the tail.
    pub fn resize(&mut self, len: u64) -> Result<()> {
        let size = self.len();
        if len > MAX_LEN {
            return Err(Error::invalid(format!(
                "resize to {len} bytes is past the limit {MAX_LEN}"
            )));
        }
        self.guarded(|s| match len.cmp(&size) {
            std::cmp::Ordering::Greater => s.record(LogOp::InsertHole {
                off: size,
                len: len - size,
            }),
            std::cmp::Ordering::Less => s.record(LogOp::Collapse {
                off: len,
                len: size - len,
            }),
            std::cmp::Ordering::Equal => Ok(()),
        })
    }

    /// Tags the extent that starts at `off` (splitting one that starts earlier).
    pub fn set_tag(&mut self, off: u64, tag: u8) -> Result<()> {
        if off >= self.len() {
            return Err(Error::invalid(format!(
                "set_tag at {off} is outside the space of {} bytes",
                self.len()
            )));
        }
        self.guarded(|s| s.record(LogOp::Tag { off, tag }))
    }

    /// Makes every change so far durable (Figure 9): the buffered data is written and
    /// synced, then the log entries that refer to it; segments freed by those entries
    /// become reusable and their space is returned. If the log's entries have grown
    /// past `log_capacity`'s worth (or, with `log_grows_with_tree`, twice the tree's
    /// last checkpoint's if that is larger), the tree is checkpointed and the log
    /// starts over.
    pub fn sync(&mut self) -> Result<()> {
        self.sync_begin()?;
        let synced = self.sync_data();
        self.sync_finish(synced)?;
        self.punch_now()
    }

    /// [`punch_freed`](Self::punch_freed) with exclusive access: an error poisons the
    /// space, as one inside a change does.
    fn punch_now(&mut self) -> Result<()> {
        let r = self.segs.punch_freed(&self.data);
        if r.is_err() {
            self.poisoned = true;
        }
        r
    }

    /// Returns the disk space of the segments the last sync freed (`fallocate`'s hole
    /// punching, which on a file system mounted with `discard` waits for the device:
    /// with the punches in it, `sync_finish` took 18 ms on average in a 10M-pair load
    /// here, docs/benchmarks.md), with shared access: a caller
    /// that lets readers in after [`sync_finish`](Self::sync_finish) calls it then.
    /// Otherwise the next change does it first, or the next sync.
    pub fn punch_freed(&self) -> Result<()> {
        self.segs.punch_freed(&self.data)
    }

    /// [`sync`](Self::sync) in three steps, for a caller that lets readers in while
    /// the files sync (the slow part): this one writes the buffered data and queues
    /// the checksums for the log; [`sync_data`](Self::sync_data) needs only shared
    /// access; [`sync_finish`](Self::sync_finish) takes its result. The space changes
    /// nothing between the first and the last (it counts as poisoned: every change is
    /// refused).
    pub fn sync_begin(&mut self) -> Result<()> {
        self.guarded(|s| s.write_out())?;
        // Until `sync_finish`, as inside any change: a panic in between (in the files'
        // syncs) leaves the space poisoned, so it writes nothing more.
        self.poisoned = true;
        self.syncing = true;
        Ok(())
    }

    /// The second step of [`sync`](Self::sync), after [`sync_begin`](Self::sync_begin),
    /// with shared access: the data file's sync, then the log entries (which refer to
    /// that data) written and synced, and, if the log has grown past its limit, a
    /// checkpoint of the tree written and synced and the log started over. Only the
    /// bookkeeping is left to [`sync_finish`](Self::sync_finish), which must follow.
    pub fn sync_data(&self) -> Result<()> {
        if !self.syncing {
            return Err(Error::invalid("sync_data without sync_begin"));
        }
        self.data.sync()?;
        let mut meta = self.meta.lock();
        let meta = &mut *meta;
        meta.log.commit(&*self.log_file)?;
        let mut limit = self.opts.log_capacity;
        if self.opts.log_grows_with_tree {
            limit = limit.max(LOG_TREES * meta.treefile.durable_bytes());
        }
        if meta.log.weight() > limit {
            let seq = meta.treefile.write_checkpoint(&self.tree, &self.table)?;
            meta.checkpointed = true;
            meta.log.reset(&*self.log_file, seq)?;
        }
        Ok(())
    }

    /// The last step of [`sync`](Self::sync), given the result of
    /// [`sync_data`](Self::sync_data): segments the logged entries freed become
    /// reusable (their space is returned by [`punch_freed`](Self::punch_freed) or the
    /// next change), and a checkpoint written is marked as taking the tree's changes.
    pub fn sync_finish(&mut self, synced: Result<()>) -> Result<()> {
        if !self.syncing {
            return Err(Error::invalid("sync_finish without sync_begin"));
        }
        self.syncing = false;
        self.poisoned = false;
        let checkpointed = std::mem::take(&mut self.meta.get_mut().checkpointed);
        self.guarded(|s| {
            synced?;
            if checkpointed {
                TreeFile::checkpointed(&mut s.tree, &mut s.table);
                s.stats.checkpoints += 1;
            }
            s.segs.log_committed(s.views_alive());
            Ok(())
        })
    }

    /// Moves the block checksums the segments have taken into the table, and queues them
    /// for the log.
    fn absorb_sums(&mut self) {
        for (block, sum) in self.segs.take_sums() {
            self.table.set(block, sum);
            self.sum_ops.push(LogOp::BlockSum {
                block,
                fill: sum.fill,
                crc: sum.crc,
            });
        }
    }

    /// Writes what the file does not have of the open segment, and maps the file
    /// again if it outgrew the window: the window spans the whole file at all times.
    fn flush_data(&mut self) -> Result<()> {
        self.stats.data_bytes_written += self.segs.flush(&*self.data)?;
        self.fit_window();
        Ok(())
    }

    fn commit(&mut self) -> Result<()> {
        self.write_out()?;
        self.data.sync()?;
        self.commit_log()
    }

    /// What a commit does before the data file's sync.
    fn write_out(&mut self) -> Result<()> {
        self.absorb_sums();
        // Checksums are logged before the changes that refer to the data they cover.
        let ops = std::mem::take(&mut self.sum_ops);
        self.meta.get_mut().log.prepend(ops);
        self.flush_data()
    }

    /// What a commit does after the data file's sync.
    fn commit_log(&mut self) -> Result<()> {
        self.meta.get_mut().log.commit(&*self.log_file)?;
        self.segs.log_committed(self.views_alive());
        self.segs.punch_freed(&self.data)
    }

    fn checkpoint_now(&mut self) -> Result<()> {
        let meta = self.meta.get_mut();
        let seq = meta.treefile.checkpoint(&mut self.tree, &mut self.table)?;
        meta.log.reset(&*self.log_file, seq)?;
        self.stats.checkpoints += 1;
        Ok(())
    }

    /// Syncs, checkpoints the tree (so the next open replays nothing) and closes.
    pub fn close(mut self) -> Result<()> {
        self.close_in_place()
    }

    /// [`close`](Self::close) for a space that others still hold (readers of a store
    /// whose database closed): reads still work, and nothing more is written, not even
    /// when the last holder drops it.
    pub fn close_in_place(&mut self) -> Result<()> {
        if self.closed {
            return Ok(());
        }
        self.guarded(|s| {
            s.commit()?;
            s.checkpoint_now()
        })?;
        self.closed = true;
        Ok(())
    }

    /// Writes the tree to its file now, after a sync.
    pub fn checkpoint(&mut self) -> Result<()> {
        self.guarded(|s| {
            s.commit()?;
            s.checkpoint_now()
        })
    }

    /// Moves `[off, off + len)` into new, contiguous extents (FlexSpace's
    /// `flexspace_defrag`), keeping its tags. For ranges whose data has been scattered
    /// over many small extents by inserts.
    pub fn defrag(&mut self, off: u64, len: u64) -> Result<()> {
        let mut data = vec![0u8; Self::buffer_len(len)?];
        self.read(off, &mut data)?;
        let tags = self.tags_in(off, len);
        self.put_over(off, &data, &tags)
    }

    /// A buffer's length for `len` bytes of the space.
    fn buffer_len(len: u64) -> Result<usize> {
        usize::try_from(len).map_err(|_| Error::invalid(format!("{len} bytes at once")))
    }

    /// The tags set inside `[off, off + len)`, with their offsets.
    fn tags_in(&self, off: u64, len: u64) -> Vec<(u64, u8)> {
        self.tree
            .extents_from(off)
            .take_while(|e| e.offset < off + len)
            .filter(|e| e.offset >= off && e.tag != 0)
            .map(|e| (e.offset, e.tag))
            .collect()
    }

    /// The first step of a [`defrag`](Self::defrag) in two, which needs only
    /// shared access: the bytes of `[off, off + len)` and the tags inside it. A caller
    /// that holds off every other change until [`put_moved`](Self::put_moved) can read
    /// them beside readers. The bytes are read as
    /// [`read_self_checked`](Self::read_self_checked) reads them, without the data
    /// blocks' checksums (a range in a few hundred small extents would otherwise read
    /// and sum a block for each): the caller verifies their own checksums
    /// ([`Moving::bytes`]) before it puts them back, since the blocks they go to get
    /// checksums of what is written.
    pub fn read_to_move(&self, off: u64, len: u64) -> Result<Moving> {
        self.check_inside("defrag", off, len)?;
        let mut data = vec![0u8; Self::buffer_len(len)?];
        self.read_self_checked(off, &mut data)?;
        Ok(Moving {
            off,
            data,
            tags: self.tags_in(off, len),
        })
    }

    /// The second step of a [`defrag`](Self::defrag) in two: writes what
    /// [`read_to_move`](Self::read_to_move) read into new, contiguous extents and sets
    /// its tags again, as one change. The range must hold what was read (no change in
    /// between), which debug builds check.
    pub fn put_moved(&mut self, moving: &Moving) -> Result<()> {
        let Moving { off, data, tags } = moving;
        self.check_inside("defrag", *off, data.len() as u64)?;
        if cfg!(debug_assertions) {
            // The bytes as read: whether they are sound is the caller's to check.
            let mut now = vec![0u8; data.len()];
            self.read_self_checked(*off, &mut now)?;
            assert!(
                now == *data,
                "defrag of [{off}, +{}) changed in between",
                data.len()
            );
        }
        self.put_over(*off, data, tags)
    }

    /// [`defrag`](Self::defrag) of `[off, off + data.len())` for a caller that has
    /// just read its bytes, `data`, and checked them: they are written into new,
    /// contiguous extents, which carry one tag, `tag` on the first (none if 0),
    /// whatever tags the old ones had (each tag inside the range would cut an extent
    /// there). The content does not change if `data` is what the range holds, which
    /// debug builds check.
    pub fn rewrite(&mut self, off: u64, data: &[u8], tag: u8) -> Result<()> {
        self.check_inside("rewrite", off, data.len() as u64)?;
        if cfg!(debug_assertions) {
            let mut now = vec![0u8; data.len()];
            self.read(off, &mut now)?;
            assert!(
                now == data,
                "rewrite of [{off}, +{}) with other bytes",
                data.len()
            );
        }
        let tags: &[(u64, u8)] = if tag != 0 { &[(off, tag)] } else { &[] };
        self.put_over(off, data, tags)
    }

    /// Writes `data` over `[off, off + data.len())` into new extents, then sets
    /// `tags`, as one change: the common part of [`defrag`](Self::defrag) and
    /// [`rewrite`](Self::rewrite), which keep the content and so count no user bytes.
    fn put_over(&mut self, off: u64, data: &[u8], tags: &[(u64, u8)]) -> Result<()> {
        self.guarded(|s| {
            s.make_room_for(data.len() as u64)?;
            s.put_data(data, |s, at, addr, n| {
                s.record(LogOp::Overwrite {
                    off: off + at,
                    len: n,
                    addr,
                })
            })?;
            tags.iter()
                .try_for_each(|&(o, tag)| s.record(LogOp::Tag { off: o, tag }))
        })
    }

    /// One garbage-collection pass now; returns how many segments it freed.
    pub fn gc(&mut self) -> Result<u64> {
        self.guarded(|s| s.gc_pass())
    }

    /// Greedy GC (§4.1): relocates the live extents of the least-utilized segments, at
    /// most [`GC_VICTIMS`] per pass and only those at most (K-1)/K full, so that each
    /// freed segment pays for the space its relocations take; then syncs, which frees
    /// them. [`gc_plan`](Self::gc_plan), [`gc_apply`](Self::gc_apply), a sync and
    /// [`gc_finish`](Self::gc_finish) in one call.
    fn gc_pass(&mut self) -> Result<u64> {
        let Some(mut plan) = self.gc_plan()? else {
            return Ok(0);
        };
        self.relocate(&mut plan, usize::MAX)?;
        self.commit()?;
        Ok(self.gc_finish(&plan))
    }

    /// Whether a GC pass is due now, or will be once `ahead` more bytes are written and
    /// none freed: the test every change makes first (`FlexSpace::make_room_for`), so
    /// that a caller can run the pass before the changes, in steps
    /// ([`gc_plan`](Self::gc_plan)), and not inside one of them. Segments count as used
    /// whole, so what counts is how many the bytes open past the open one's room.
    pub fn gc_due(&self, ahead: u64) -> bool {
        let seg = self.opts.segment_size;
        let (live, used) = self.segs.totals();
        // Held segments are free as soon as the views that hold them are gone: a pass
        // could not free them sooner.
        let used = used - self.segs.held_count() as u64 * seg;
        let opened = ahead.saturating_sub(self.segs.room()).div_ceil(seg) * seg;
        let used = used.saturating_add(opened);
        used - live > 4 * seg && used as f64 > live as f64 * self.opts.gc_space_amplification
    }

    /// The size of the data file's segments ([`SpaceOptions::segment_size`](super::SpaceOptions::segment_size)).
    pub fn segment_size(&self) -> u64 {
        self.opts.segment_size
    }

    /// Whether the data file has a size limit
    /// ([`SpaceOptions::max_data_size`](super::SpaceOptions::max_data_size)).
    pub fn is_limited(&self) -> bool {
        self.opts.max_data_size.is_some()
    }

    /// Works out a GC pass with shared access to the space: picks its victims (as
    /// `FlexSpace::gc_pass` does), finds every piece of data they hold by one walk of
    /// the tree's extents, and reads the pieces. `None`: no segment is worth a pass.
    /// The walk passes every extent (0.2 s at 3M), which is why it is done here, where
    /// readers may share the space, and not under exclusive access.
    pub fn gc_plan(&self) -> Result<Option<GcPlan>> {
        let k = self.opts.k();
        let limit = self.opts.segment_size / k * (k - 1);
        let mut victims: Vec<usize> = (0..self.segs.count())
            .filter(|&g| self.segs.state[g] == State::Used && self.segs.live[g] <= limit)
            .collect();
        victims.sort_by_key(|&g| self.segs.live[g]);
        // Only as many victims as their live bytes fit where they are going: the open
        // segment's room, free segments, and (under a limit) segments not yet allocated.
        let seg = self.opts.segment_size;
        let unallocated = match self.opts.max_data_size {
            Some(max) => (max / seg).saturating_sub(self.segs.count() as u64),
            None => u64::MAX / seg / 2,
        };
        let mut room =
            self.segs.room() + (self.segs.free_count() as u64 + unallocated).saturating_mul(seg);
        victims.retain(|&g| {
            let fits = self.segs.live[g] <= room;
            room = room.saturating_sub(self.segs.live[g]);
            fits
        });
        victims.truncate(GC_VICTIMS);
        if victims.is_empty() {
            return Ok(None);
        }
        let size = self.opts.segment_size;
        // The walk below passes every extent of the space (3.7M after a 10M-pair load)
        // and tests each by the segments its first and last bytes lie in, a shift each
        // (segments are a power of two long) and a look in a table of the victims:
        // testing it against each victim's range took most of the walk's time.
        let shift = size.trailing_zeros();
        let mut victim = vec![false; self.segs.count()];
        for &g in &victims {
            victim[g] = true;
        }
        // Pieces (offset, length, address) of every extent stored in a victim, cut at
        // segment ends.
        let mut moves = Vec::new();
        for e in self.tree.extents() {
            let Some(mut addr) = e.addr.filter(|_| e.len > 0) else {
                continue;
            };
            if !touches(&victim, shift, addr, e.len) {
                continue;
            }
            let (mut off, mut left) = (e.offset, e.len);
            while left > 0 {
                let n = left.min((addr / size + 1) * size - addr);
                if touches(&victim, shift, addr, 1) {
                    moves.push((off, n, addr));
                }
                (off, addr, left) = (off + n, addr + n, left - n);
            }
        }
        // Read in address order, each checksummed block once: the pieces are mostly a
        // record or two long, and reading them in the space's order verified a whole
        // 4 KiB block per piece, the same block again for each piece it holds. All go
        // into one buffer, each piece at its place in the space's order.
        let mut starts = Vec::with_capacity(moves.len() + 1);
        let mut total = 0usize;
        for &(_, len, _) in &moves {
            starts.push(total);
            total += len as usize;
        }
        starts.push(total);
        let mut by_addr: Vec<usize> = (0..moves.len()).collect();
        by_addr.sort_unstable_by_key(|&i| moves[i].2);
        let mut bytes = vec![0u8; total];
        let mut block = BlockReader::default();
        for i in by_addr {
            let old = moves[i].2;
            self.read_data_through(old, &mut bytes[starts[i]..starts[i + 1]], &mut block)?;
        }
        Ok(Some(GcPlan {
            victims,
            moves,
            starts,
            bytes,
            done: 0,
            changes: self.changes,
            opening: self.opening,
        }))
    }

    /// Relocates up to `max` more of `plan`'s pieces (all, with `usize::MAX`), written
    /// in the space's order so that pieces next to each other there stay so. A caller
    /// that lets readers in between calls keeps the space otherwise unchanged from the
    /// plan to its last piece; a plan the space changed under, or another space's (or
    /// another opening's), is refused with `InvalidArgument` (its pieces may no longer
    /// be where it found them). A piece's
    /// old bytes stay where they were until a sync frees its segment, so a read between
    /// two calls finds the same content either way.
    pub fn gc_apply(&mut self, plan: &mut GcPlan, max: usize) -> Result<()> {
        if plan.opening != self.opening || plan.changes != self.changes {
            return Err(Error::invalid(
                "a GC plan of a space that has changed since",
            ));
        }
        let r = self.guarded(|s| s.relocate(plan, max));
        plan.changes = self.changes;
        r
    }

    /// Relocates up to `max` more of `plan`'s pieces, inside a change.
    fn relocate(&mut self, plan: &mut GcPlan, max: usize) -> Result<()> {
        let to = plan.moves.len().min(plan.done.saturating_add(max));
        while plan.done < to {
            let i = plan.done;
            let (off, _, old) = plan.moves[i];
            let data = &plan.bytes[plan.starts[i]..plan.starts[i + 1]];
            self.put_data(data, |s, at, new, n| {
                s.stats.gc_bytes_relocated += n;
                s.record(LogOp::Remap {
                    off: off + at,
                    len: n,
                    old: old + at,
                    new,
                })
            })?;
            plan.done += 1;
        }
        Ok(())
    }

    /// Ends a GC pass whose pieces are all relocated and made durable (a sync, which
    /// frees the victims): counts it; returns how many victims it freed. A plan not
    /// wholly applied, or another space's, counts nothing and frees nothing.
    pub fn gc_finish(&mut self, plan: &GcPlan) -> u64 {
        if plan.opening != self.opening || !plan.is_applied() {
            return 0;
        }
        let freed = plan
            .victims
            .iter()
            .filter(|&&g| matches!(self.segs.state[g], State::Free | State::Held))
            .count() as u64;
        self.stats.gc_passes += 1;
        self.stats.gc_segments_freed += freed;
        self.refresh_stats();
        freed
    }
}

/// A range's bytes and tags on their way to new extents
/// ([`FlexSpace::read_to_move`], then [`FlexSpace::put_moved`]).
#[derive(Debug)]
pub struct Moving {
    off: u64,
    data: Vec<u8>,
    tags: Vec<(u64, u8)>,
}

impl Moving {
    /// The bytes read, for the caller to verify.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }
}

/// A GC pass worked out with shared access to a space ([`FlexSpace::gc_plan`]): its
/// victims, every piece of data they hold and the pieces' bytes, for
/// [`FlexSpace::gc_apply`] to relocate, in one call or in several.
#[derive(Debug)]
pub struct GcPlan {
    victims: Vec<usize>,
    /// Pieces (offset, length, address) in the space's order, cut at segment ends.
    moves: Vec<(u64, u64, u64)>,
    /// Where each piece's bytes start in `bytes`, and one more entry: the end.
    starts: Vec<usize>,
    bytes: Vec<u8>,
    /// Pieces relocated so far.
    done: usize,
    /// The space's count of changes when the plan was made or last applied.
    changes: u64,
    /// The opening of the space that made the plan.
    opening: u64,
}

impl GcPlan {
    /// Whether every piece has been relocated.
    pub fn is_applied(&self) -> bool {
        self.done == self.moves.len()
    }

    /// The pieces of data the pass relocates.
    pub fn pieces(&self) -> usize {
        self.moves.len()
    }
}

impl Drop for FlexSpace {
    fn drop(&mut self) {
        // Best effort: what a caller needed durable, it synced.
        if !self.poisoned && !self.closed {
            let _ = self.commit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::touches;
    use crate::io::FaultVfs;
    use crate::space::segments::State;
    use crate::space::{FlexSpace, SpaceOptions};

    const SEG: u64 = 64 << 10;

    /// Small segments and extents: a few hundred KiB cross several segments.
    fn opts() -> SpaceOptions {
        SpaceOptions {
            segment_size: SEG,
            max_extent: 4 << 10,
            ..SpaceOptions::default()
        }
    }

    /// Every extent as (offset, length, address).
    fn extents(s: &FlexSpace) -> Vec<(u64, u64, u64)> {
        (s.tree.extents())
            .filter_map(|e| e.addr.map(|a| (e.offset, e.len, a)))
            .collect()
    }

    /// Logs of versions 1 and 2 (fixed entries; in version 1 every block a commit) are
    /// replayed, then replaced at open by a checkpoint: every block after them is in
    /// the current format, under a header that says so, and a crash after that
    /// recovers the same content.
    #[test]
    fn a_log_of_an_older_version_is_replayed_and_replaced_at_open() {
        use crate::io::{CrashMode, OpenMode, Vfs};
        use crate::space::log;
        use std::path::Path;
        let path = Path::new("/space/flexspace.log");
        for version in [1, 2] {
            let vfs = FaultVfs::new(13);
            // A log large enough that no checkpoint empties it.
            let o = SpaceOptions {
                log_capacity: 1 << 20,
                ..opts()
            };
            let open = |vfs: &FaultVfs| FlexSpace::open(vfs.shared(), "/space", o).unwrap();
            let content = |s: &FlexSpace| {
                let mut buf = vec![0u8; s.len() as usize];
                s.read(0, &mut buf).unwrap();
                buf
            };
            let mut s = open(&vfs);
            let mut model = Vec::new();
            for round in 0..5u32 {
                let block: Vec<u8> = (0..3_000u32).map(|j| (round * 13 + j) as u8).collect();
                let at = model.len() / 2;
                s.insert(at as u64, &block).unwrap();
                model.splice(at..at, block);
                s.sync().unwrap();
            }
            drop(s);
            let f = vfs.open(path, OpenMode::Existing).unwrap();
            let current = log::read(&*f).unwrap();
            assert_eq!(current.version, log::VERSION);
            assert!(current.ops.len() > 10, "{} entries", current.ops.len());
            let epoch = current.epoch.unwrap();
            log::write_fixed(&*f, epoch, version, &current.ops);
            assert_eq!(log::read(&*f).unwrap().version, version);
            let s = open(&vfs);
            assert_eq!(content(&s), model, "version {version}");
            let replaced = log::read(&*f).unwrap();
            assert_eq!(replaced.version, log::VERSION, "the log was replaced");
            assert!(replaced.epoch.unwrap() > epoch, "after a checkpoint");
            drop(s);
            vfs.crash(CrashMode::DropUnsynced);
            assert_eq!(content(&open(&vfs)), model, "version {version}");
        }
    }

    /// With `log_grows_with_tree`, the log's entries grow to twice the tree's last
    /// checkpoint before the next: no checkpoint while they are below that, and one
    /// once a sync takes them past it.
    #[test]
    fn the_log_grows_to_twice_the_trees_checkpoint_before_the_next() {
        let vfs = FaultVfs::new(17);
        let o = SpaceOptions {
            log_capacity: 16 << 10,
            log_grows_with_tree: true,
            ..opts()
        };
        let mut s = FlexSpace::open(vfs.shared(), "/space", o).unwrap();
        let mut x = 7u64;
        let mut insert = |s: &mut FlexSpace, n: usize| {
            for _ in 0..n {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let at = (x >> 33) % (s.len() + 1);
                s.insert(at, &[x as u8; 100]).unwrap();
            }
        };
        // A tree of a few hundred KiB, checkpointed.
        insert(&mut s, 3_000);
        s.checkpoint().unwrap();
        let tree = s.meta.get_mut().treefile.durable_bytes();
        assert!(tree > 8 * o.log_capacity, "a tree of {tree} bytes");
        let mut highest = 0;
        loop {
            let before = s.stats().checkpoints;
            insert(&mut s, 400);
            s.sync().unwrap();
            if s.stats().checkpoints > before {
                break;
            }
            highest = s.meta.get_mut().log.weight();
            assert!(highest <= 2 * tree, "{highest} of log, {tree} of tree");
        }
        // The last sync took the log past twice the tree (by 400 inserts' entries).
        assert!(highest > 2 * tree - 2 * tree / 10, "{highest}, {tree}");
        assert!(
            s.meta.get_mut().log.weight() < o.log_capacity,
            "the log starts over"
        );
    }

    /// A GC pass relocates the part of an extent that runs on into a victim from a
    /// segment that is not one: the segments it frees hold nothing the space maps,
    /// and once they are written over, the space reads as before.
    #[test]
    fn a_gc_pass_moves_the_ends_of_extents_that_run_into_its_victims() {
        let vfs = FaultVfs::new(7);
        let (mut s, mut model) = segment_one_emptied(&vfs);
        let seg = |a: u64| a / SEG;
        let mut plan = s
            .gc_plan()
            .unwrap()
            .expect("segment 1 is nearly all garbage");
        while !plan.is_applied() {
            s.gc_apply(&mut plan, usize::MAX).unwrap();
        }
        s.sync_begin().unwrap();
        s.sync_finish(s.sync_data()).unwrap();
        assert!(s.gc_finish(&plan) > 0, "the pass freed its victims");
        for (off, len, a) in extents(&s) {
            for g in seg(a)..=seg(a + len - 1) {
                assert!(
                    !matches!(s.segs.state[g as usize], State::Free | State::Freeing),
                    "extent at {off} ({len} bytes at {a}) lies in freed segment {g}"
                );
            }
        }
        // Written over: new blocks take the freed segments.
        for i in 0..60u32 {
            let block = vec![i as u8; 3_000];
            s.insert(0, &block).unwrap();
            model.splice(0..0, block);
        }
        s.sync().unwrap();
        let mut got = vec![0; model.len()];
        s.read(0, &mut got).unwrap();
        assert!(got == model, "the space's bytes changed");
        s.check().unwrap();
    }

    /// The segments a sync in steps frees keep their bytes until they are punched:
    /// by `punch_freed`, with shared access (readers beside it read no free segment),
    /// or else by the next change, before it may write to them.
    #[test]
    fn segments_a_sync_in_steps_frees_are_punched_with_shared_access_or_by_the_next_change() {
        use std::path::Path;
        let data = Path::new("/space/flexspace.data");
        for punch_shared in [true, false] {
            let vfs = FaultVfs::new(9);
            let (mut s, model) = segment_one_emptied(&vfs);
            let mut plan = s.gc_plan().unwrap().expect("garbage in segment 1");
            s.gc_apply(&mut plan, usize::MAX).unwrap();
            s.sync_begin().unwrap();
            s.sync_finish(s.sync_data()).unwrap();
            s.gc_finish(&plan);
            let freed: Vec<u64> = (0..s.segs.state.len() as u64)
                .filter(|&g| s.segs.state[g as usize] == State::Free)
                .collect();
            assert!(!freed.is_empty(), "the pass freed its victims");
            let zeroed = |vfs: &FaultVfs| {
                let bytes = vfs.contents(data).unwrap();
                freed.iter().all(|&g| {
                    let r = (g * SEG) as usize..((g + 1) * SEG) as usize;
                    bytes[r].iter().all(|&b| b == 0)
                })
            };
            assert!(!zeroed(&vfs), "punched before its time");
            assert!(s.segs.punch_pending());
            if punch_shared {
                let shared: &FlexSpace = &s;
                shared.punch_freed().unwrap();
            } else {
                // A change small enough to stay in the open segment.
                s.insert(0, b"x").unwrap();
            }
            assert!(!s.segs.punch_pending());
            assert!(zeroed(&vfs), "punch_shared {punch_shared}: not punched");
            let mut got = vec![0; s.len() as usize];
            s.read(0, &mut got).unwrap();
            let want = if punch_shared { 0 } else { 1 };
            assert!(got[want..] == model[..], "the space's bytes changed");
        }
    }

    /// 66 blocks of 3,000 bytes appended (the last of segment 0 runs into segment 1)
    /// and synced, then every extent that lies wholly in segment 1 collapsed and
    /// synced: segment 1 holds nearly nothing live. Returns the space and its content.
    fn segment_one_emptied(vfs: &FaultVfs) -> (FlexSpace, Vec<u8>) {
        let mut s = FlexSpace::open(vfs.shared(), "/space", opts()).unwrap();
        let mut model = Vec::new();
        // Blocks of 3,000 bytes appended: some run across a segment's end.
        for i in 0..66u32 {
            let block: Vec<u8> = (0..3_000u32).map(|j| (i * 7 + j) as u8).collect();
            s.insert(model.len() as u64, &block).unwrap();
            model.extend_from_slice(&block);
        }
        s.sync().unwrap();
        let seg = |a: u64| a / SEG;
        let crossing: Vec<_> = (extents(&s).into_iter())
            .filter(|&(_, len, a)| seg(a) == 0 && seg(a + len - 1) == 1)
            .collect();
        assert_eq!(crossing.len(), 1, "{:?}", extents(&s));
        // Everything that lies wholly in segment 1 goes, from the end backwards so
        // that the offsets found still hold: only the crossing block's end stays.
        let inside: Vec<_> = (extents(&s).into_iter())
            .filter(|&(_, len, a)| seg(a) == 1 && seg(a + len - 1) == 1)
            .collect();
        assert!(inside.len() > 10);
        for &(off, len, _) in inside.iter().rev() {
            s.collapse(off, len).unwrap();
            model.drain(off as usize..(off + len) as usize);
        }
        s.sync().unwrap();
        (s, model)
    }

    /// Segments of 16 bytes; only the second (bytes 16..32) and the fifth (64..80) are
    /// marked.
    #[test]
    fn extents_touch_the_marked_segments_their_bytes_lie_in() {
        let marked = [false, true, false, false, true];
        let t = |addr, len| touches(&marked, 4, addr, len);
        // Within one segment.
        assert!(!t(0, 16));
        assert!(t(16, 16));
        assert!(t(20, 4));
        assert!(!t(32, 1));
        // Across two: by the first byte or by the last.
        assert!(t(8, 9));
        assert!(t(24, 16));
        assert!(!t(40, 24));
        assert!(t(60, 5));
        // Passing a marked segment whole: neither end is in it.
        assert!(t(0, 48));
        assert!(t(40, 48));
        assert!(!t(32, 32));
        // Past the table: not marked.
        assert!(!t(80, 1000));
        assert!(!t(u64::MAX - 16, 16));
    }
}

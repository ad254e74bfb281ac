//! The write-ahead log: numbered segment files `wal-NNNNNNNN.log` of checksummed blocks
//! ([`format`]), written by the group-commit leader ([`group`]) and made durable under
//! one sync watermark ([`sync`]).
//!
//! Each segment begins with a header record (magic, format version, segment number).
//! Every later record is one group commit and is stamped with the durable sequence at
//! the time it was written. That stamp is what tells a torn tail from corruption on
//! recovery: when a record is unreadable (or points past the value log's valid end),
//! the reader keeps looking. If a later readable record says the lost sequence had
//! already been made durable, bytes that were once durable are damaged, and recovery
//! fails with [`Error::Corruption`] (unless the caller accepts a prefix). Otherwise the
//! damage is the tail of writes that no sync covered, which no writer was told were
//! durable; the log is cut there.
//!
//! A new segment is started at every open and whenever the active one passes the
//! segment size; the old one is synced first, so a sync of the active segment covers
//! everything before it. The active segment's write-back is started every
//! [`WRITEBACK_EVERY`] bytes, so that sync finds little left to write.

pub(crate) mod format;
pub(crate) mod group;
pub(crate) mod sync;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::io::{Numbered, OpenMode, Vfs, VfsFile, WRITEBACK_EVERY};
use crate::{Error, Result};
use format::{Found, Group, Op};

/// The WAL format version this build writes and the newest it reads.
pub(crate) const VERSION: u32 = 1;

/// The segment files.
const SEGMENTS: Numbered = Numbered {
    prefix: "wal-",
    suffix: ".log",
};

/// The file name of segment `id`.
pub(crate) fn segment_name(id: u32) -> String {
    SEGMENTS.name(id)
}

fn parse_segment_name(name: &str) -> Option<u32> {
    SEGMENTS.parse(name)
}

#[derive(Debug)]
struct Writer {
    id: u32,
    file: Arc<dyn VfsFile>,
    len: u64,
    /// The file's space is reserved up to here (zeros past `len` read as a clean end).
    allocated: u64,
    /// How far the segment's write-back has been started ([`WRITEBACK_EVERY`]).
    started: u64,
}

/// How far ahead of the write position WAL space is reserved (with zeros, see
/// [`VfsFile::allocate`]). Small, because a segment's last reservation is written out
/// whole when the segment is synced for the last time: 64 KiB is one system call per
/// 64 KiB of log, and at most that many bytes of zeros per segment on the device.
const ALLOCATE_AHEAD: u64 = 64 << 10;

/// The write-ahead log of one database directory.
#[derive(Debug)]
pub(crate) struct Wal {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    segment_size: u64,
    /// Locked only by the group-commit leader (and by close).
    writer: Mutex<Writer>,
    /// The active segment, for syncs that run beside the next leader's write.
    current: Mutex<Arc<dyn VfsFile>>,
    /// Where a read-only open found the log torn (segment, offset), which it left as it
    /// was: [`Wal::check`] reads the log up to there.
    torn_at: Option<(u32, u64)>,
    /// The framed record being written, kept between appends (locked inside `writer`).
    frame: Mutex<Vec<u8>>,
    bytes_written: AtomicU64,
    syncs: AtomicU64,
    sync_micros: AtomicU64,
}

/// Buffers of a group's size are kept between groups: a fresh one each time is a large
/// allocation that the allocator takes from the OS and returns, and the page faults
/// and zeroing of its pages cost writers about 6% of a load. One outgrowing this is
/// dropped, so a rare huge group does not keep its memory.
pub(crate) const REUSED_BUFFER_MAX: usize = 4 << 20;

/// Empties `buf`, and frees it if it grew past [`REUSED_BUFFER_MAX`].
pub(crate) fn keep_reusable(buf: &mut Vec<u8>) {
    buf.clear();
    if buf.capacity() > REUSED_BUFFER_MAX {
        *buf = Vec::new();
    }
}

/// What recovery found: the groups to replay and where the log ends.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// Groups above the applied sequence, in order (a group that straddles it keeps only
    /// its batches above it).
    pub(crate) groups: Vec<Group>,
    /// The last sequence in the log (or the applied one, if higher).
    pub(crate) last_seq: u64,
    /// Whether a torn tail was cut off.
    pub(crate) cut_tail: bool,
}

impl Wal {
    /// Reads every segment in `dir`, returns the groups above `applied`, cuts the log
    /// after its last good record (durably), and starts a new segment for writes; on a
    /// read-only file system ([`Vfs::read_only`]) it cuts and starts nothing, and its
    /// writer refuses every write.
    /// `holds` says whether an op's value-log pointer is valid; an op that points past
    /// the value log's end ends the log like a torn record does.
    pub(crate) fn recover(
        vfs: Arc<dyn Vfs>,
        dir: &Path,
        segment_size: u64,
        applied: u64,
        accept_prefix: bool,
        mut holds: impl FnMut(&Op) -> Result<bool>,
    ) -> Result<(Wal, Recovered)> {
        let mut ids: Vec<u32> = vfs
            .list(dir)?
            .iter()
            .filter_map(|n| parse_segment_name(n))
            .collect();
        ids.sort_unstable();
        let mut found = Vec::new();
        for &id in &ids {
            let path = dir.join(segment_name(id));
            let file = vfs.open(&path, OpenMode::Existing)?;
            let mut data = vec![0; usize::try_from(file.len()?).unwrap_or(usize::MAX)];
            file.read_exact_at(&mut data, 0)?;
            let mut reader = format::Reader::new(&data);
            match reader.next() {
                Some(Found::Record { payload, .. }) => match format::parse_segment_header(&payload)
                {
                    Some((v, _)) if v > VERSION => {
                        return Err(Error::UnsupportedVersion {
                            path,
                            found: v,
                            supported: VERSION,
                        })
                    }
                    Some((_, hid)) if hid == id => {}
                    _ => found.push((id, bad(0, "not a WAL segment header"))),
                },
                Some(b @ Found::Bad { .. }) => found.push((id, b)),
                None => found.push((id, bad(0, "empty segment"))),
            }
            found.extend(reader.map(|f| (id, f)));
        }

        let mut groups = Vec::new();
        let mut last: Option<u64> = None;
        let mut cut = None;
        let mut items = found.into_iter();
        for (id, f) in items.by_ref() {
            let (offset, payload) = match f {
                Found::Record { offset, payload } => (offset, payload),
                Found::Bad { offset, reason } => {
                    cut = Some((id, offset, reason.to_string()));
                    break;
                }
            };
            let corrupt =
                |reason: String| Error::corruption(dir.join(segment_name(id)), offset, reason);
            let g = format::decode_group(&payload).map_err(|r| corrupt(r.to_string()))?;
            match last {
                Some(l) if g.first != l + 1 => {
                    return Err(corrupt(format!("sequence {} follows {l}", g.first)))
                }
                None if g.first > applied + 1 => {
                    return Err(corrupt(format!(
                        "the log starts at sequence {} but only {applied} were applied",
                        g.first
                    )))
                }
                _ => {}
            }
            let dangling = g.batches.iter().flatten().find_map(|op| match holds(op) {
                Ok(true) => None,
                Ok(false) => Some(Ok(op)),
                Err(e) => Some(Err(e)),
            });
            if let Some(op) = dangling {
                let at = match op? {
                    Op::PutSeparated { ptr, .. } => format!(
                        " (offset {} of {})",
                        ptr.offset,
                        crate::vlog::segment_name(ptr.segment)
                    ),
                    _ => String::new(),
                };
                cut = Some((
                    id,
                    offset,
                    format!("entry points past the value log's valid end{at}"),
                ));
                break;
            }
            last = Some(g.last());
            groups.push(g);
        }

        let cut_tail = cut.is_some();
        let mut torn_at = None;
        if let Some((id, offset, reason)) = cut {
            let lost = last.map_or(applied + 1, |l| l + 1);
            if !accept_prefix {
                for (later_id, f) in items {
                    let Found::Record {
                        offset: at,
                        payload,
                    } = f
                    else {
                        continue;
                    };
                    let Ok(g) = format::decode_group(&payload) else {
                        continue;
                    };
                    if g.durable >= lost {
                        return Err(Error::corruption(
                            dir.join(segment_name(id)),
                            offset,
                            format!(
                                "{reason}, but the record at offset {at} of {} shows sequence \
                                 {lost} had been made durable",
                                segment_name(later_id)
                            ),
                        ));
                    }
                }
            }
            // Read-only, the log is read up to the tear and left as it is.
            if vfs.read_only() {
                torn_at = Some((id, offset));
            } else {
                cut_log(vfs.as_ref(), dir, &ids, id, offset)?;
            }
        }

        for g in &mut groups {
            if g.first <= applied {
                let skip = usize::try_from(applied - g.first + 1).unwrap_or(usize::MAX);
                g.batches.drain(..skip.min(g.batches.len()));
                g.first = applied + 1;
            }
        }
        groups.retain(|g| !g.batches.is_empty());
        let next_id = ids.last().map_or(1, |i| i + 1);
        let writer = if vfs.read_only() {
            // A database opened read-only writes nothing: its writer stands for the
            // segment it would have started, which refuses every write.
            Writer {
                id: next_id,
                file: vfs.open(&dir.join(segment_name(next_id)), OpenMode::CreateNew)?,
                len: 0,
                allocated: 0,
                started: 0,
            }
        } else {
            create_segment(vfs.as_ref(), dir, next_id)?
        };
        let wal = Wal {
            current: Mutex::new(Arc::clone(&writer.file)),
            writer: Mutex::new(writer),
            frame: Mutex::new(Vec::new()),
            vfs,
            dir: dir.to_path_buf(),
            segment_size,
            bytes_written: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            sync_micros: AtomicU64::new(0),
            torn_at,
        };
        let recovered = Recovered {
            groups,
            last_seq: last.unwrap_or(0).max(applied),
            cut_tail,
        };
        Ok((wal, recovered))
    }

    /// Appends one record (a group's payload). Not durable until [`Wal::sync`]. Only the
    /// group-commit leader calls this, so records land in sequence order.
    pub(crate) fn append(&self, payload: &[u8]) -> Result<()> {
        let mut w = self.writer.lock();
        if w.len >= self.segment_size {
            w.file.sync()?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
            *w = create_segment(self.vfs.as_ref(), &self.dir, w.id + 1)?;
            *self.current.lock() = Arc::clone(&w.file);
        }
        let mut buf = self.frame.lock();
        buf.clear();
        let end = format::frame(&mut buf, w.len, payload);
        if end > w.allocated {
            // Reserve ahead: writes into reserved space change neither the file's size
            // nor its block map, so the syncs after them write no metadata.
            let to = end.next_multiple_of(ALLOCATE_AHEAD);
            w.file.allocate(to)?;
            w.allocated = to;
        }
        w.file.write_at(&buf, w.len)?;
        w.len = end;
        if w.len - w.started >= WRITEBACK_EVERY {
            // Without it, the sync that closes the segment (at every memtable's freeze,
            // in a writer's path) wrote the whole memtable's log: 23–33 ms at 64 MiB.
            w.file.start_writeback(w.started, w.len - w.started);
            w.started = w.len;
        }
        self.bytes_written
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        keep_reusable(&mut buf);
        Ok(())
    }

    /// Closes the active segment (synced, so a sync of the new one still covers
    /// everything before it) and starts the next; returns the closed segment's number.
    /// Called when a memtable becomes immutable, under the lock that orders appends, so
    /// the closed segment and those before it hold exactly the batches up to that point.
    ///
    /// The sync is also what makes a memtable's batches durable in the WAL before the
    /// committer applies any of them: a sync of the space in the middle of a commit (a
    /// GC pass of the space makes one) can make part of a memtable durable, and without
    /// its WAL records the rest could not be replayed. Handing this sync to a thread
    /// left a batch half there in `db_crash` (docs/benchmarks.md, thirty-second
    /// session).
    pub(crate) fn rotate(&self) -> Result<u32> {
        let mut w = self.writer.lock();
        w.file.sync()?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let closed = w.id;
        *w = create_segment(self.vfs.as_ref(), &self.dir, closed + 1)?;
        *self.current.lock() = Arc::clone(&w.file);
        Ok(closed)
    }

    /// Removes every segment numbered `through` or below, durably: their batches are in
    /// the sorted keyspaces, and the manifest's applied sequence says so.
    pub(crate) fn remove_through(&self, through: u32) -> Result<()> {
        let active = self.writer.lock().id;
        debug_assert!(through < active, "the active WAL segment is never removed");
        let mut removed = false;
        for id in self
            .vfs
            .list(&self.dir)?
            .iter()
            .filter_map(|n| parse_segment_name(n))
        {
            if id <= through && id < active {
                self.vfs.remove(&self.dir.join(segment_name(id)))?;
                removed = true;
            }
        }
        if removed {
            self.vfs.sync_dir(&self.dir)?;
        }
        Ok(())
    }

    /// The number of the segment being written.
    pub(crate) fn active_segment(&self) -> u32 {
        self.writer.lock().id
    }

    /// Makes everything appended so far durable.
    pub(crate) fn sync(&self) -> Result<()> {
        let file = Arc::clone(&self.current.lock());
        let t0 = std::time::Instant::now();
        file.sync()?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.sync_micros.fetch_add(micros, Ordering::Relaxed);
        Ok(())
    }

    /// Reads every segment and checks every record up to the write position; returns
    /// the number of group records.
    pub(crate) fn check(&self) -> Result<u64> {
        let mut ids: Vec<u32> = self
            .vfs
            .list(&self.dir)?
            .iter()
            .filter_map(|n| parse_segment_name(n))
            .collect();
        ids.sort_unstable();
        let (active, active_len) = {
            let w = self.writer.lock();
            (w.id, w.len)
        };
        let mut records = 0;
        for id in ids {
            if self.torn_at.is_some_and(|(torn, _)| id > torn) {
                break;
            }
            let path = self.dir.join(segment_name(id));
            let file = match self.vfs.open(&path, OpenMode::Existing) {
                Ok(f) => f,
                // The committer removed it since the listing: its batches are committed.
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound && id < active =>
                {
                    continue
                }
                Err(e) => return Err(e),
            };
            let end = match self.torn_at {
                Some((torn, at)) if torn == id => at,
                _ if id == active => active_len,
                _ => file.len()?,
            };
            let mut data = vec![0; usize::try_from(end).unwrap_or(usize::MAX)];
            file.read_exact_at(&mut data, 0)?;
            for (i, found) in format::Reader::new(&data).enumerate() {
                match found {
                    Found::Bad { offset, reason } => {
                        return Err(Error::corruption(path, offset, reason));
                    }
                    Found::Record { offset, payload } if i > 0 => {
                        format::decode_group(&payload)
                            .map_err(|r| Error::corruption(&path, offset, r))?;
                        records += 1;
                    }
                    Found::Record { .. } => {}
                }
            }
        }
        Ok(records)
    }

    /// Bytes written since open (fragment headers and padding included).
    pub(crate) fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Ordering::Relaxed)
    }

    /// Syncs issued since open.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Microseconds spent in group-commit syncs since open.
    pub(crate) fn sync_micros(&self) -> u64 {
        self.sync_micros.load(Ordering::Relaxed)
    }
}

fn bad(offset: u64, reason: &'static str) -> Found {
    Found::Bad { offset, reason }
}

/// Creates segment `id` with its header record, durable in the directory.
fn create_segment(vfs: &dyn Vfs, dir: &Path, id: u32) -> Result<Writer> {
    let file = vfs.open(&dir.join(segment_name(id)), OpenMode::CreateNew)?;
    let mut buf = Vec::new();
    let len = format::frame(&mut buf, 0, &format::segment_header(VERSION, id));
    file.write_at(&buf, 0)?;
    file.sync()?;
    vfs.sync_dir(dir)?;
    Ok(Writer {
        id,
        file,
        len,
        allocated: 0,
        started: 0,
    })
}

/// Cuts the log at `offset` of segment `id`: that segment is truncated (or removed, if
/// nothing before the cut is a record) and every later one removed, durably.
fn cut_log(vfs: &dyn Vfs, dir: &Path, ids: &[u32], id: u32, offset: u64) -> Result<()> {
    for &later in ids.iter().filter(|&&i| i > id) {
        vfs.remove(&dir.join(segment_name(later)))?;
    }
    let path = dir.join(segment_name(id));
    if offset == 0 {
        vfs.remove(&path)?;
    } else {
        let file = vfs.open(&path, OpenMode::Existing)?;
        file.set_len(offset)?;
        file.sync()?;
    }
    vfs.sync_dir(dir)
}

#[cfg(test)]
mod tests;

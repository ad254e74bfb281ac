//! The value log (WiscKey §3.2–3.4): large values written once, outside the keyspaces.
//!
//! Values at or above the separation threshold are appended, one record per value
//! (key, sequence, value; see the private `record` module), to numbered segment files
//! `vlog-NNNNNNNN.seg`. The WAL and the memtable hold a [`Pointer`] instead of the value.
//! The group-commit leader appends a whole group's records with one write (the buffering
//! of WiscKey §3.4.1, without a second user-space buffer that reads would have to
//! search) and syncs the value log before the WAL, so an acknowledged WAL entry never
//! points at a value that is not durable.
//!
//! Invariants:
//! - Only the active (highest-numbered) segment is appended to; a segment is synced
//!   before the next one is created, so only the active segment can have a torn tail.
//! - On open, the active segment is cut back to its last whole record (`ValueLog::open`);
//!   the WAL replay then drops entries that point past a segment's valid end.
//! - Every read checks the header CRC, the payload CRC, the pointer's check value and the
//!   key, and returns [`Error::Corruption`] on any mismatch.
//! - Only bytes that never change are mapped into memory ([`VfsFile::map`]): a sealed
//!   segment whole, and the active one up to its length when last mapped (appends go
//!   past it, and open cuts only past the last whole record; it is mapped again as it
//!   grows). Reads of a record inside a mapping copy the value out and check the copy,
//!   with no system call, while the page cache holds the segment; a scan whose caller
//!   borrows its pairs (`ValueBytes::Mapped`) checks the value where it lies and
//!   hands out the mapping's bytes, with no copy at all. Once a read has
//!   waited on the device they use `pread` (a fault on a mapped page reads one page and
//!   blocks), until a run of reads is served at page-cache speed again
//!   (`ValueLog::device`).
//!
//! Every segment's bytes are accounted exactly, by who holds them (the private `usage`
//! module); the database's GC collects segments by those counts, relocating what is live.

mod ahead;
mod cold;
mod record;
mod usage;

pub(crate) use ahead::{First, Job, Readers};

pub use record::Pointer;
pub(crate) use usage::Holder;
pub use usage::SegmentUsage;

use std::collections::BTreeMap;
use std::io::IoSlice;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use smallvec::{smallvec, SmallVec};

use crate::io::{Mapped, Numbered, OpenMode, Vfs, VfsFile, WRITEBACK_EVERY};
use crate::memtable::KeyspaceId;
use crate::{Error, Result};
use record::{Header, HEADER_LEN};
use usage::Usage;

/// The segment files.
const SEGMENTS: Numbered = Numbered {
    prefix: "vlog-",
    suffix: ".seg",
};

/// The file name of segment `id`.
pub(crate) fn segment_name(id: u32) -> String {
    SEGMENTS.name(id)
}

fn parse_segment_name(name: &str) -> Option<u32> {
    SEGMENTS.parse(name)
}

/// One value to separate: which keyspace and key it belongs to, its sequence, its bytes.
pub(crate) struct NewValue<'a> {
    pub(crate) ks: KeyspaceId,
    pub(crate) key: &'a [u8],
    pub(crate) seq: u64,
    pub(crate) value: &'a [u8],
}

#[derive(Debug)]
struct Active {
    id: u32,
    file: Arc<dyn VfsFile>,
    len: u64,
    /// The file's length as this log last made it: `len`, or past it the zeros a sync
    /// reserved ([`RESERVE`]).
    allocated: u64,
    synced: bool,
    /// How much of the segment its mapping covers (0: none yet).
    mapped: u64,
    /// How far the segment's write-back has been started ([`WRITEBACK_EVERY`]).
    started: u64,
}

/// After a sync, the active segment is extended with zeros to this far past its end
/// (once less than half of that is left), so that the syncs after it overwrite blocks
/// the file already has instead of growing it. A sync of a file whose size changed
/// writes the inode and waits for it before the cache flush: a `Sync` put of an 8 KiB
/// value synced the value log in about 200 µs, and the WAL in 85. Only syncs reserve:
/// a buffered load writes each byte once, not zeros first. A segment is cut back to
/// its last record when sealed, and at open.
const RESERVE: u64 = 1 << 20;

/// The active segment is mapped again once the bytes appended past its mapping reach
/// this, or an eighth of the segment, whichever is more: a mapping costs a system call
/// (and a copy on the in-memory file system), so not one per append.
const MAP_STEP: u64 = 1 << 20;

/// One record as GC's scan finds it.
#[derive(Debug)]
pub(crate) struct Scanned {
    pub(crate) ptr: Pointer,
    pub(crate) ks: KeyspaceId,
    pub(crate) seq: u64,
    pub(crate) key: Box<[u8]>,
    pub(crate) value: Box<[u8]>,
}

/// A run of back-to-back records is read with one call up to this size.
const RUN_BYTES: u64 = 1 << 20;

/// [`ValueLog::append_as`] copies a value shorter than this beside its record's header
/// rather than giving the write a slice of its own: the kernel walks every slice, and
/// for a short value that costs more than the copy.
const COPY_BELOW: usize = 512;

/// One value a scan wants read ahead: its pointer, whose it must be, and when the scan
/// needs it (lower first).
#[derive(Debug)]
pub(crate) struct Wanted {
    pub(crate) ptr: Pointer,
    pub(crate) ks: KeyspaceId,
    pub(crate) key: WantedKey,
    pub(crate) order: u64,
}

/// A wanted value's key, held inline when short (no allocation per value a scan reads
/// ahead).
pub(crate) type WantedKey = SmallVec<[u8; 24]>;

/// What one [`RunRead`] read: a result per item, in its order (inline for a run of
/// one, the usual case of values at random places).
pub(crate) type RunResults = SmallVec<[Result<ValueBytes>; 1]>;

/// The bytes at the start of a run a scan asks the processor for as it hands the run
/// to the reader threads ([`RunRead::hint_start`]): whoever checks the value later
/// finds them in the cache, and the checksum's own hints ([`cold`]) cover the rest.
/// 1, 2 and 4 KiB measured alike (docs/benchmarks.md, the thirtieth session).
const HINT_START: usize = 2048;

/// A value read through a pointer, checked: its own buffer, or the bytes of a
/// segment's mapping, which it keeps alive (a segment GC removes keeps its pages while
/// mapped).
#[derive(Debug)]
pub(crate) enum ValueBytes {
    Owned(Vec<u8>),
    Mapped {
        map: Arc<Mapped>,
        start: usize,
        len: usize,
    },
}

impl ValueBytes {
    /// The value's bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            ValueBytes::Owned(v) => v,
            ValueBytes::Mapped { map, start, len } => &map[*start..*start + *len],
        }
    }

    /// The value in a buffer of its own (a copy, if it is borrowed from a mapping).
    pub(crate) fn into_vec(self) -> Vec<u8> {
        match self {
            ValueBytes::Owned(v) => v,
            b @ ValueBytes::Mapped { .. } => b.as_slice().to_vec(),
        }
    }
}

/// Records to read with one call: back to back in one segment, or a single one.
#[derive(Debug)]
pub(crate) struct RunRead {
    file: Arc<dyn VfsFile>,
    /// The segment's mapping, if it has one and reads were not waiting on the device
    /// when the run was planned: the run is then copied out of it (or checked in it).
    map: Option<Arc<Mapped>>,
    /// The scan borrows what it reads: values in the mapping are checked where they
    /// lie and handed out as [`ValueBytes::Mapped`], not copied.
    borrow: bool,
    /// In file order; never empty.
    items: SmallVec<[Wanted; 1]>,
}

impl RunRead {
    /// The values this read fetches, in file order.
    pub(crate) fn items(&self) -> &[Wanted] {
        &self.items
    }

    /// Asks the processor for the first [`HINT_START`] bytes of the run's first record,
    /// if the mapping holds them.
    pub(crate) fn hint_start(&self) {
        if let (Some(map), Ok(at)) = (&self.map, usize::try_from(self.items[0].ptr.offset)) {
            if let Some(b) = map.get(at..at + HINT_START) {
                crate::prefetch::prefetch(b);
            }
        }
    }

    /// Reads the run and checks each record as every read through a pointer is
    /// checked; the results are in the order of [`RunRead::items`].
    pub(crate) fn read(&self) -> RunResults {
        let file = self.file.as_ref();
        let first = self.items[0].ptr;
        let last = &self.items[self.items.len() - 1];
        let end = last.ptr.offset + last.ptr.record_len(last.key.len());
        // A run appended to the active segment since its last mapping is read below,
        // with one call, not one per record.
        let map = (self.map.as_ref()).filter(|m| end <= m.len() as u64);
        if let Some(map) = map {
            return (self.items.iter())
                .map(|w| {
                    if self.borrow {
                        read_in_place(file, map, &w.ptr, w.ks, &w.key)
                    } else {
                        read_record(file, Some(map), &w.ptr, w.ks, &w.key).map(ValueBytes::Owned)
                    }
                })
                .collect();
        }
        if let [w] = &self.items[..] {
            // One record: its value is read straight into the buffer returned.
            return smallvec![read_direct(file, &w.ptr, w.ks, &w.key).map(ValueBytes::Owned)];
        }
        let len = end - first.offset;
        let mut buf = vec![0; len as usize];
        if let Err(e) = read_full(file, &mut buf, first.offset) {
            return self.items.iter().map(|_| Err(e.duplicate())).collect();
        }
        self.items
            .iter()
            .map(|w| {
                let at = (w.ptr.offset - first.offset) as usize;
                let rec = &buf[at..at + w.ptr.record_len(w.key.len()) as usize];
                verified(rec, file.path(), &w.ptr, w.ks, &w.key)
                    .map(|n| ValueBytes::Owned(rec[HEADER_LEN + w.key.len()..][..n].to_vec()))
            })
            .collect()
    }
}

/// A segment's handle, and a mapping of its bytes: all of them once sealed, the
/// active segment's up to where it was last mapped.
#[derive(Clone, Debug)]
struct Segment {
    file: Arc<dyn VfsFile>,
    /// `None` if the file system maps nothing, or a new active segment is not yet
    /// mapped.
    map: Option<Arc<Mapped>>,
}

impl Segment {
    /// A segment whose first `len` bytes never change, mapped if the file system can.
    fn mapped(file: Arc<dyn VfsFile>, len: u64) -> Segment {
        let map = file.map(len).map(Arc::new);
        Segment { file, map }
    }

    /// A new, empty active segment.
    fn empty(file: Arc<dyn VfsFile>) -> Segment {
        Segment { file, map: None }
    }
}

/// Reads at page-cache speed, one after another, that bring reads back to the mappings
/// after one waited on the device. One fast read was enough at first, but when part of
/// the value log is in memory and part is not, reads then alternate: each miss after a
/// hit went through a mapping and faulted its pages in one at a time, and random point
/// reads of 16 KiB values ran at 0.6 times `pread`'s rate. With this many, such a mix
/// stays on `pread`, and a value log that is all in memory returns to the mappings
/// within a few dozen reads.
const FAST_AGAIN: u32 = 64;

/// Whether a read of `bytes` that took `took` waited on the device: longer than 50 µs
/// plus 1 ns a byte (the page cache copies several bytes a nanosecond).
pub(crate) fn slow(took: Duration, bytes: u64) -> bool {
    took > Duration::from_micros(50) + Duration::from_nanos(bytes)
}

/// The value log of one database directory.
#[derive(Debug)]
pub(crate) struct ValueLog {
    vfs: Arc<dyn Vfs>,
    dir: PathBuf,
    segment_size: u64,
    active: Mutex<Active>,
    /// Every segment's handle (and mapping), for reads.
    segments: RwLock<BTreeMap<u32, Segment>>,
    /// Reads through a pointer still to be served at page-cache speed, one after
    /// another, before reads use the mappings again ([`ValueLog::device`]).
    device: AtomicU32,
    /// Who holds which bytes of every segment.
    usage: Mutex<Usage>,
    /// Segments GC removed since open: a pointer into one of them was read before
    /// the relocation and is to be looked up again.
    retired: RwLock<std::collections::BTreeSet<u32>>,
    bytes_written: AtomicU64,
    syncs: AtomicU64,
}

impl ValueLog {
    /// Opens the value log in `dir`, creating its first segment if there is none. Appends
    /// go after the active segment's last whole record; [`ValueLog::cut_tail`] removes
    /// what lies beyond it once the WAL replay has decided nothing there is needed.
    pub(crate) fn open(vfs: Arc<dyn Vfs>, dir: &Path, segment_size: u64) -> Result<ValueLog> {
        let mut segments = BTreeMap::new();
        for name in vfs.list(dir)? {
            if let Some(id) = parse_segment_name(&name) {
                segments.insert(id, vfs.open(&dir.join(&name), OpenMode::Existing)?);
            }
        }
        let mut usage = Usage::default();
        for (&id, file) in &segments {
            usage.segments.entry(id).or_default().total = file.len()?;
        }
        let last = segments.last_key_value().map(|(&id, _)| id);
        let mut held = BTreeMap::new();
        for (&id, file) in &segments {
            if Some(id) != last {
                let seg = Segment::mapped(Arc::clone(file), usage.segments[&id].total);
                held.insert(id, seg);
            }
        }
        let active = match segments.last_key_value() {
            Some((&id, file)) => {
                let len = valid_prefix(file.as_ref())?;
                usage.segments.entry(id).or_default().total = len;
                // Its whole records are mapped; a torn tail after them is not, and
                // `cut_tail` cuts only past them.
                held.insert(id, Segment::mapped(Arc::clone(file), len));
                Active {
                    id,
                    file: Arc::clone(file),
                    len,
                    allocated: len,
                    synced: true,
                    mapped: len,
                    started: len,
                }
            }
            None => {
                let file = create_segment(vfs.as_ref(), dir, 1)?;
                held.insert(1, Segment::empty(Arc::clone(&file)));
                usage.segments.entry(1).or_default();
                Active {
                    id: 1,
                    file,
                    len: 0,
                    allocated: 0,
                    synced: true,
                    mapped: 0,
                    started: 0,
                }
            }
        };
        Ok(ValueLog {
            vfs,
            dir: dir.to_path_buf(),
            segment_size,
            active: Mutex::new(active),
            segments: RwLock::new(held),
            device: AtomicU32::new(0),
            usage: Mutex::new(usage),
            retired: RwLock::new(Default::default()),
            bytes_written: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
        })
    }

    /// Cuts the active segment back to its last whole record, durably: a torn tail left
    /// by a crash must not be read as a record after new appends land beside it.
    pub(crate) fn cut_tail(&self) -> Result<()> {
        if self.vfs.read_only() {
            // Nothing is appended: a torn tail stays, unread.
            return Ok(());
        }
        let mut a = self.active.lock();
        if a.file.len()? != a.len {
            a.file.set_len(a.len)?;
            a.file.sync()?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
        }
        a.allocated = a.len;
        Ok(())
    }

    /// Appends one record per value with a single write and returns their pointers, in
    /// order, each counted as held by `holder`. Not durable until [`ValueLog::sync`].
    ///
    /// Only the records' headers and keys (and values shorter than [`COPY_BELOW`]) are
    /// encoded into a buffer; the write takes every other value from where the caller
    /// holds it. Copying a group's values into one buffer first was a sixth of a 4 KiB
    /// load's time, most of it the kernel zeroing the fresh pages of that buffer.
    pub(crate) fn append_as(
        &self,
        values: &[NewValue<'_>],
        holder: Holder,
    ) -> Result<Vec<Pointer>> {
        let copied = |v: &NewValue<'_>| v.value.len() < COPY_BELOW;
        let head_bytes = (values.iter())
            .map(|v| HEADER_LEN + v.key.len() + if copied(v) { v.value.len() } else { 0 })
            .sum();
        let mut heads = Vec::with_capacity(head_bytes);
        // Per record: (offset in the group, value length, payload CRC, record length),
        // and where its part of `heads` ends.
        let mut spans = Vec::with_capacity(values.len());
        let mut ends = Vec::with_capacity(values.len());
        let mut total = 0u64;
        for v in values {
            let check = record::encode_head(&mut heads, v.ks, v.key, v.seq, v.value);
            if copied(v) {
                heads.extend_from_slice(v.value);
            }
            let len = (HEADER_LEN + v.key.len() + v.value.len()) as u64;
            spans.push((total, v.value.len(), check, len));
            ends.push(heads.len());
            total += len;
        }
        let mut bufs = Vec::with_capacity(2 * values.len() + 1);
        let mut from = 0;
        for (v, &end) in values.iter().zip(&ends) {
            if !copied(v) {
                bufs.push(IoSlice::new(&heads[from..end]));
                bufs.push(IoSlice::new(v.value));
                from = end;
            }
        }
        if from < heads.len() {
            bufs.push(IoSlice::new(&heads[from..]));
        }
        debug_assert_eq!(
            bufs.iter().map(|b| b.len() as u64).sum::<u64>(),
            total,
            "the slices are the records"
        );
        let mut a = self.active.lock();
        if a.len > 0 && a.len + total > self.segment_size {
            self.roll(&mut a)?;
        }
        a.file.write_vectored_at(&bufs, a.len)?;
        // The bytes count as written (and their segment's total grows) from here: a
        // failed write leaves them as garbage the next open cuts away.
        let base = a.len;
        a.len += total;
        a.allocated = a.allocated.max(a.len);
        a.synced = false;
        let id = a.id;
        if a.len - a.started >= WRITEBACK_EVERY {
            a.file.start_writeback(a.started, a.len - a.started);
            a.started = a.len;
        }
        if a.len - a.mapped >= MAP_STEP.max(a.len / 8) {
            // Bytes below `len` never change: appends go past it, and open cuts only
            // past the last whole record.
            let map = a.file.map(a.len).map(Arc::new);
            if let Some(seg) = self.segments.write().get_mut(&id) {
                seg.map = map;
            }
            a.mapped = a.len;
        }
        drop(a);
        self.bytes_written.fetch_add(total, Ordering::Relaxed);
        {
            let mut u = self.usage.lock();
            u.segments.entry(id).or_default().total += total;
            for &(_, _, _, rec) in &spans {
                u.add(id, rec, holder);
            }
        }
        Ok(spans
            .into_iter()
            .map(|(at, len, check, _)| Pointer {
                segment: id,
                offset: base + at,
                len: u32::try_from(len).unwrap_or(u32::MAX),
                check,
            })
            .collect())
    }

    /// Syncs the old active segment and starts the next one (made durable in the
    /// directory before anything points into it).
    fn roll(&self, a: &mut Active) -> Result<()> {
        if a.allocated > a.len {
            // Sealed segments end at their last record (GC's scan reads them whole).
            a.file.set_len(a.len)?;
            a.synced = false;
        }
        if !a.synced {
            a.file.sync()?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
        }
        let id = a.id + 1;
        let file = create_segment(self.vfs.as_ref(), &self.dir, id)?;
        // The old active segment is sealed: nothing changes it again.
        let sealed = Segment::mapped(Arc::clone(&a.file), a.len);
        {
            let mut segments = self.segments.write();
            segments.insert(a.id, sealed);
            segments.insert(id, Segment::empty(Arc::clone(&file)));
        }
        self.usage.lock().segments.entry(id).or_default();
        *a = Active {
            id,
            file,
            len: 0,
            allocated: 0,
            synced: true,
            mapped: 0,
            started: 0,
        };
        Ok(())
    }

    /// Makes every appended record durable.
    pub(crate) fn sync(&self) -> Result<()> {
        let mut a = self.active.lock();
        if !a.synced {
            a.file.sync()?;
            a.synced = true;
            self.syncs.fetch_add(1, Ordering::Relaxed);
            if a.allocated < a.len + RESERVE / 2 {
                let to = (a.len + RESERVE).min(self.segment_size.max(a.len));
                if to > a.allocated {
                    a.file.allocate(to)?;
                    a.allocated = to;
                }
            }
        }
        Ok(())
    }

    /// Whether every byte of the record `ptr` (with a key of `key_len` bytes) lies inside
    /// the valid part of its segment: false for pointers a crash left dangling.
    pub(crate) fn holds(&self, ptr: &Pointer, key_len: usize) -> Result<bool> {
        let file = match self.segments.read().get(&ptr.segment) {
            Some(seg) => Arc::clone(&seg.file),
            None => return Ok(false),
        };
        let a = self.active.lock();
        let len = if a.id == ptr.segment {
            a.len
        } else {
            file.len()?
        };
        Ok(ptr.offset.saturating_add(ptr.record_len(key_len)) <= len)
    }

    /// Appends values held by a memtable (the write path).
    pub(crate) fn append(&self, values: &[NewValue<'_>]) -> Result<Vec<Pointer>> {
        self.append_as(values, Holder::Memory)
    }

    /// Moves the record `ptr` (with a key of `key_len` bytes) from holder `from` to
    /// holder `to`; `None` on either side means nobody (a new reference, or garbage).
    pub(crate) fn hold(
        &self,
        ptr: &Pointer,
        key_len: usize,
        from: Option<Holder>,
        to: Option<Holder>,
    ) {
        let bytes = ptr.record_len(key_len);
        let mut u = self.usage.lock();
        if let Some(h) = from {
            u.sub(ptr.segment, bytes, h);
        }
        if let Some(h) = to {
            u.add(ptr.segment, bytes, h);
        }
    }

    /// Counts the record `ptr` as held by a memtable again (the WAL replay re-creates
    /// the references).
    pub(crate) fn count_live(&self, ptr: &Pointer, key_len: usize) {
        self.hold(ptr, key_len, None, Some(Holder::Memory));
    }

    /// Releases the pins no snapshot needs (see [`usage`]); returns the bytes released.
    pub(crate) fn release_pins(&self, oldest_snapshot: Option<u64>) -> u64 {
        self.usage.lock().release(oldest_snapshot)
    }

    /// Every segment's store count, for the manifest.
    pub(crate) fn store_counts(&self) -> BTreeMap<u32, u64> {
        self.usage.lock().store_counts()
    }

    /// Sets every segment's store count (from the manifest, or a rebuild).
    pub(crate) fn set_store_counts(&self, counts: &BTreeMap<u32, u64>) {
        self.usage.lock().set_store(counts);
    }

    /// Every segment's counts.
    pub(crate) fn usage(&self) -> BTreeMap<u32, SegmentUsage> {
        self.usage.lock().segments.clone()
    }

    /// The segment appends go to.
    pub(crate) fn active_segment(&self) -> u32 {
        self.active.lock().id
    }

    /// The path of segment `id`, for error messages.
    pub(crate) fn segment_path(&self, id: u32) -> PathBuf {
        self.dir.join(segment_name(id))
    }

    /// Reads the value `ptr` points to, checking that the record is whole and belongs to
    /// `(ks, key)`.
    pub(crate) fn read(&self, ptr: &Pointer, ks: KeyspaceId, key: &[u8]) -> Result<Vec<u8>> {
        self.read_unless_retired(ptr, ks, key)?.ok_or_else(|| {
            Error::corruption(
                self.segment_path(ptr.segment),
                ptr.offset,
                "pointer into a value-log segment that GC removed",
            )
        })
    }

    /// Reads like [`ValueLog::read`], but returns `None` if GC removed the segment
    /// since the pointer was found: the caller looks the key up again, and finds the
    /// relocated pointer (GC removes a segment only after its live values' new pointers
    /// are in place).
    pub(crate) fn read_unless_retired(
        &self,
        ptr: &Pointer,
        ks: KeyspaceId,
        key: &[u8],
    ) -> Result<Option<Vec<u8>>> {
        let seg = self.segments.read().get(&ptr.segment).cloned();
        let Some(seg) = seg else {
            if self.retired.read().contains(&ptr.segment) {
                return Ok(None);
            }
            return Err(Error::corruption(
                self.segment_path(ptr.segment),
                ptr.offset,
                "pointer to a value-log segment that does not exist",
            ));
        };
        let map = seg.map.filter(|_| !self.device());
        let t0 = Instant::now();
        let value = read_record(seg.file.as_ref(), map.as_deref(), ptr, ks, key)?;
        self.set_device(slow(t0.elapsed(), u64::from(ptr.len)));
        Ok(Some(value))
    }

    /// Whether reads wait on the device: one did, and fewer than [`FAST_AGAIN`] have
    /// been served at page-cache speed since. Reads then leave the mappings alone: a
    /// page a mapping misses is read by a fault, one page at a time and only when
    /// touched, where `pread` asks for the whole record at once (and a scan's reader
    /// threads keep many such reads in flight).
    pub(crate) fn device(&self) -> bool {
        self.device.load(Ordering::Relaxed) > 0
    }

    /// Records whether the read just done waited on the device.
    pub(crate) fn set_device(&self, slow: bool) {
        let left = self.device.load(Ordering::Relaxed);
        let next = if slow {
            FAST_AGAIN
        } else {
            left.saturating_sub(1)
        };
        if next != left {
            // Racing readers may lose an update: the count only steers, by a read or two.
            self.device.store(next, Ordering::Relaxed);
        }
    }

    /// Forgets that reads waited on the device.
    #[cfg(test)]
    pub(crate) fn clear_device(&self) {
        self.device.store(0, Ordering::Relaxed);
    }

    /// Plans a scan's read-ahead (WiscKey §3.3.1): records of `want` that lie back to
    /// back (up to [`RUN_BYTES`]) grouped into one read, the reads in the order the scan
    /// first needs them (by [`Wanted::order`]). A value whose segment is gone is left
    /// out: the scan reads it the usual way, which finds the segment retired and looks
    /// the key up again. Each read holds its segment's handle, so GC removing the
    /// segment later does not disturb it. With `borrow`, values read from a mapping
    /// are checked in place and borrowed from it (see [`RunRead::read`]).
    pub(crate) fn plan_reads(&self, mut want: Vec<Wanted>, borrow: bool) -> Vec<RunRead> {
        want.sort_by_key(|w| (w.ptr.segment, w.ptr.offset));
        let mapped = !self.device();
        let segments = self.segments.read();
        // Each run with the first order among its values.
        let mut runs: Vec<(u64, RunRead)> = Vec::new();
        for w in want {
            if let Some((first_order, run)) = runs.last_mut() {
                let first = run.items[0].ptr;
                let last = &run.items[run.items.len() - 1];
                let end = last.ptr.offset + last.ptr.record_len(last.key.len());
                if last.ptr.segment == w.ptr.segment
                    && end == w.ptr.offset
                    && end - first.offset + w.ptr.record_len(w.key.len()) <= RUN_BYTES
                {
                    *first_order = (*first_order).min(w.order);
                    run.items.push(w);
                    continue;
                }
            }
            if let Some(seg) = segments.get(&w.ptr.segment) {
                runs.push((
                    w.order,
                    RunRead {
                        file: Arc::clone(&seg.file),
                        map: seg.map.clone().filter(|_| mapped),
                        borrow,
                        items: smallvec![w],
                    },
                ));
            }
        }
        runs.sort_by_key(|(order, _)| *order);
        runs.into_iter().map(|(_, run)| run).collect()
    }

    /// Reads every whole record of sealed segment `id`, in order (GC's scan).
    pub(crate) fn scan_segment(&self, id: u32) -> Result<Vec<Scanned>> {
        let file = (self.segments.read().get(&id))
            .map(|seg| Arc::clone(&seg.file))
            .ok_or_else(|| Error::invalid(format!("value-log segment {id} does not exist")))?;
        let len = file.len()?;
        let size = usize::try_from(len)
            .map_err(|_| Error::corruption(file.path(), 0, "segment larger than memory"))?;
        let mut data = vec![0; size];
        file.read_exact_at(&mut data, 0)?;
        let mut out = Vec::new();
        let mut at = 0usize;
        while at < data.len() {
            let bad = |why: &str| Error::corruption(file.path(), at as u64, why.to_string());
            let h = Header::decode(&data[at..]).map_err(bad)?;
            let end = at as u64 + h.record_len();
            if end > len {
                return Err(bad("value-log record runs past the segment end"));
            }
            let payload = &data[at + HEADER_LEN..end as usize];
            if crate::checksum::crc32c(payload) != h.payload_crc {
                return Err(bad("value-log record payload checksum mismatch"));
            }
            let (key, value) = payload.split_at(h.key_len as usize);
            out.push(Scanned {
                ptr: Pointer {
                    segment: id,
                    offset: at as u64,
                    len: h.value_len,
                    check: h.payload_crc,
                },
                ks: h.ks,
                seq: h.seq,
                key: key.into(),
                value: value.into(),
            });
            at = end as usize;
        }
        Ok(out)
    }

    /// Removes sealed segment `id` (GC found nothing in it that anyone needs) and syncs
    /// the directory; returns the bytes it held. Readers that hold its handle finish
    /// their reads (the file lives until the last handle goes); later ones find it
    /// retired and look their key up again.
    pub(crate) fn retire(&self, id: u32) -> Result<u64> {
        if id >= self.active.lock().id {
            return Err(Error::invalid(format!(
                "value-log segment {id} is the active one"
            )));
        }
        self.retired.write().insert(id);
        if self.segments.write().remove(&id).is_none() {
            return Ok(0);
        }
        let freed = self
            .usage
            .lock()
            .segments
            .remove(&id)
            .map_or(0, |u| u.total);
        self.vfs.remove(&self.segment_path(id))?;
        self.vfs.sync_dir(&self.dir)?;
        Ok(freed)
    }

    /// Reads every record of every segment and checks both checksums; returns the
    /// number of records. Bytes after the last whole record are corruption, except in
    /// the active segment past its write position.
    pub(crate) fn check(&self) -> Result<u64> {
        let segments: Vec<_> = self
            .segments
            .read()
            .iter()
            .map(|(&i, f)| (i, Arc::clone(&f.file)))
            .collect();
        let (active_id, active_len) = {
            let a = self.active.lock();
            (a.id, a.len)
        };
        let mut records = 0;
        for (id, file) in segments {
            let end = if id == active_id {
                active_len
            } else {
                file.len()?
            };
            let (valid, n) = scan(file.as_ref(), end)?;
            if valid != end {
                return Err(Error::corruption(
                    file.path(),
                    valid,
                    "value-log record fails its checksum or runs past the segment end",
                ));
            }
            records += n;
        }
        Ok(records)
    }

    /// Bytes appended since open.
    pub(crate) fn bytes_written(&self) -> u64 {
        self.bytes_written.load(Ordering::Relaxed)
    }

    /// Syncs issued since open.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// Live bytes per segment.
    #[cfg(test)]
    pub(crate) fn live_bytes(&self) -> BTreeMap<u32, u64> {
        self.usage
            .lock()
            .segments
            .iter()
            .map(|(&s, u)| (s, u.live()))
            .collect()
    }
}

/// Fills `buf` from `file` at `offset`; running out of file is corruption.
fn read_full(file: &dyn VfsFile, buf: &mut [u8], offset: u64) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(&mut buf[done..], offset + done as u64)?;
        if n == 0 {
            return Err(Error::corruption(
                file.path(),
                offset,
                "pointer reaches past the end of its segment",
            ));
        }
        done += n;
    }
    Ok(())
}

/// The value of record `ptr` of `(ks, key)`, checked as [`read_direct`] checks it:
/// copied out of `map` when the mapping holds the whole record, else read from `file`.
/// The copy is what is checked, so the bytes returned are the bytes the checksum
/// covered.
fn read_record(
    file: &dyn VfsFile,
    map: Option<&Mapped>,
    ptr: &Pointer,
    ks: KeyspaceId,
    key: &[u8],
) -> Result<Vec<u8>> {
    let Some((_, rec)) = map.and_then(|m| record_in(m, ptr, key.len())) else {
        return read_direct(file, ptr, ks, key);
    };
    let (head, payload) = rec.split_at(HEADER_LEN + key.len());
    let stored_key = &head[HEADER_LEN..];
    let value = cold::to_vec(payload);
    let payload_crc = crate::checksum::crc32c_append(crate::checksum::crc32c(stored_key), &value);
    check_record(head, payload_crc, stored_key, file.path(), ptr, ks, key)?;
    Ok(value)
}

/// Where record `ptr` (with a key of `key_len` bytes) starts in `map`, and its bytes, if
/// the mapping holds it whole.
fn record_in<'m>(map: &'m Mapped, ptr: &Pointer, key_len: usize) -> Option<(usize, &'m [u8])> {
    let start = usize::try_from(ptr.offset).ok()?;
    let len = usize::try_from(ptr.record_len(key_len)).ok()?;
    Some((start, map.get(start..start.checked_add(len)?)?))
}

/// The value of record `ptr` of `(ks, key)` in `map`, checked where it lies and
/// borrowed from it: no copy. The mapping holds bytes that never change (see
/// [`VfsFile::map`]), so the bytes the caller sees are the bytes the checksum covered;
/// a record the mapping does not hold whole is read from `file` into a buffer.
fn read_in_place(
    file: &dyn VfsFile,
    map: &Arc<Mapped>,
    ptr: &Pointer,
    ks: KeyspaceId,
    key: &[u8],
) -> Result<ValueBytes> {
    let Some((start, rec)) = record_in(map, ptr, key.len()) else {
        return read_direct(file, ptr, ks, key).map(ValueBytes::Owned);
    };
    let n = verified(rec, file.path(), ptr, ks, key)?;
    Ok(ValueBytes::Mapped {
        map: Arc::clone(map),
        start: start + HEADER_LEN + key.len(),
        len: n,
    })
}

/// Reads the record `ptr` of `(ks, key)` with the header and key in one buffer and the
/// value straight into the one returned (no copy of the value), checking it as
/// [`verified`] does.
fn read_direct(file: &dyn VfsFile, ptr: &Pointer, ks: KeyspaceId, key: &[u8]) -> Result<Vec<u8>> {
    let mut head = vec![0; HEADER_LEN + key.len()];
    let mut value = vec![0; ptr.len as usize];
    if file.read_two_at(&mut head, &mut value, ptr.offset)? < head.len() + value.len() {
        return Err(Error::corruption(
            file.path(),
            ptr.offset,
            "pointer reaches past the end of its segment",
        ));
    }
    let stored_key = &head[HEADER_LEN..];
    let payload_crc = crate::checksum::crc32c_append(crate::checksum::crc32c(stored_key), &value);
    check_record(&head, payload_crc, stored_key, file.path(), ptr, ks, key)?;
    Ok(value)
}

/// Checks that `rec` is the whole record `ptr` was made for, of `(ks, key)`; returns the
/// value's length (it follows the header and the key).
fn verified(rec: &[u8], path: &Path, ptr: &Pointer, ks: KeyspaceId, key: &[u8]) -> Result<usize> {
    let payload = rec.get(HEADER_LEN..).unwrap_or_default();
    let stored_key = payload.get(..key.len()).unwrap_or_default();
    let crc = cold::crc32c_append(0, payload);
    check_record(rec, crc, stored_key, path, ptr, ks, key)?;
    Ok(ptr.len as usize)
}

/// The checks of a read through a pointer: the header (`head`) is whole, keyspace and
/// lengths match the pointer, the payload CRC stored, computed (`payload_crc`) and in
/// the pointer agree, and the stored key is `key`.
fn check_record(
    head: &[u8],
    payload_crc: u32,
    stored_key: &[u8],
    path: &Path,
    ptr: &Pointer,
    ks: KeyspaceId,
    key: &[u8],
) -> Result<()> {
    let bad = |reason: &str| Error::corruption(path, ptr.offset, reason.to_string());
    let h = Header::decode(head).map_err(bad)?;
    if h.ks != ks || h.key_len as usize != key.len() || h.value_len != ptr.len {
        return Err(bad(
            "record does not match its pointer (keyspace or lengths)",
        ));
    }
    if h.payload_crc != ptr.check {
        return Err(bad("record check value differs from the pointer's"));
    }
    if payload_crc != h.payload_crc {
        return Err(bad("record payload checksum mismatch"));
    }
    if stored_key != key {
        return Err(bad("record belongs to another key"));
    }
    Ok(())
}

fn create_segment(vfs: &dyn Vfs, dir: &Path, id: u32) -> Result<Arc<dyn VfsFile>> {
    let file = vfs.open(&dir.join(segment_name(id)), OpenMode::CreateNew)?;
    vfs.sync_dir(dir)?;
    Ok(file)
}

/// The length of the longest prefix of `file` made of whole, checksummed records.
fn valid_prefix(file: &dyn VfsFile) -> Result<u64> {
    Ok(scan(file, file.len()?)?.0)
}

/// Scans whole, checksummed records from the start of `file` up to `len`: returns where
/// they stop and how many there are.
fn scan(file: &dyn VfsFile, len: u64) -> Result<(u64, u64)> {
    let mut records = 0;
    let mut at = 0;
    let mut head = [0u8; HEADER_LEN];
    let mut payload = Vec::new();
    while at + HEADER_LEN as u64 <= len {
        file.read_exact_at(&mut head, at)?;
        let Ok(h) = Header::decode(&head) else { break };
        if at + h.record_len() > len {
            break;
        }
        payload.resize(h.key_len as usize + h.value_len as usize, 0);
        file.read_exact_at(&mut payload, at + HEADER_LEN as u64)?;
        if crate::checksum::crc32c(&payload) != h.payload_crc {
            break;
        }
        at += h.record_len();
        records += 1;
    }
    Ok((at, records))
}

#[cfg(test)]
mod tests;

//! FlexSpace: a persistent flexible address space (FlexSpace §4).
//!
//! A byte-addressed space in which bytes can be inserted or removed anywhere, shifting
//! everything after them in O(log n), with no data rewritten. Three files in one
//! directory:
//! - the data file (`flexspace.data`): fixed-size segments written log-structured
//!   through an in-memory buffer;
//! - the FlexTree file (`flexspace.tree`): the extent index, written copy-on-write under
//!   two alternating checksummed headers;
//! - the logical log (`flexspace.log`): every index change since the last checkpoint,
//!   as small fixed-size entries in checksummed blocks.
//!
//! Durability follows the paper's Figure 9: data, sync, log, sync; and when the log is
//! large, nodes, sync, header, sync, then the log starts over. Nothing is durable until
//! [`FlexSpace::sync`] returns; after a crash, [`FlexSpace::open`] recovers the space as it
//! was at some moment between the last acknowledged `sync` and the last change issued.
//!
//! Reads take `&self` and may run from many threads at once. Every change takes `&mut
//! self`: wrap the space in a reader-writer lock to share it. The data file is read
//! through a mapping of it where the file system offers one ([`SpaceOptions::map_data`]):
//! since only `&mut self` methods write the file, no read runs while bytes change.

mod crc;
mod log;
mod segments;
mod treefile;
mod view;
mod write;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::flextree::{FlexTree, FlexTreeOptions, Hint, Run};
use crate::io::{FileLock, OpenMode, Vfs, VfsFile, Window};
use crate::{Error, Result};
use crc::{BlockSum, CrcTable};
use log::{LogOp, LogWriter};
use segments::Segments;
use treefile::TreeFile;
pub use view::SpaceView;
pub use write::{GcPlan, Moving};

const DATA_FILE: &str = "flexspace.data";
const TREE_FILE: &str = "flexspace.tree";
const LOG_FILE: &str = "flexspace.log";
const LOCK_FILE: &str = "flexspace.lock";

/// Runs of a range no further apart than this in the data file are read with one
/// read, the bytes between them included ([`Spans`]): copying 4 KiB from the page
/// cache costs about what one more system call does.
const SPAN_GAP: u64 = 4096;

/// A read from a [`Spot`] copies this many bytes before it asks whether to go on: a
/// point read wants its interval only up to its record (half of it, on average).
const SPOT_STEP: usize = 512;

/// The runs of an unverified read grouped into *spans*: runs that lie in the same
/// segment within [`SPAN_GAP`] bytes of each other are read with one `pread`, the gaps
/// between them included, and copied into place. An insert into the middle of an
/// extent leaves its two halves physically adjacent with the new bytes elsewhere, so a
/// range that inserts have split into a few extents is mostly a few spans, and each
/// read saved is a system call saved (at a few hundred bytes an extent, the call costs
/// more than the copy). A span is read when the logical order first needs one of its
/// runs, so a read that stops early still reads less. A read through a window makes no
/// system call to save: it copies each run from the mapping straight into place, since
/// a span's buffer cost allocations and a second copy of every byte.
struct Spans {
    /// The span of each run (`usize::MAX` for a hole).
    span_of: Vec<usize>,
    /// Address, length and how many runs, of each span.
    spans: Vec<(u64, u64, usize)>,
    /// What each span of several runs holds once read.
    read: Vec<Span>,
}

/// A span of several runs: not read yet, read, or (a read of it failed) read run by run.
enum Span {
    Unread,
    Read(Vec<u8>),
    Apart,
}

impl Spans {
    /// Groups `runs` (a range's pieces in logical order) by address.
    fn new(runs: &[Run], segment_size: u64) -> Spans {
        let mut order: Vec<(u64, usize)> = runs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.addr.map(|a| (a, i)))
            .collect();
        order.sort_unstable();
        let mut span_of = vec![usize::MAX; runs.len()];
        let mut spans: Vec<(u64, u64, usize)> = Vec::with_capacity(order.len());
        for (a, i) in order {
            let len = runs[i].len;
            match spans.last_mut() {
                Some((s, l, n))
                    if a >= *s + *l
                        && a - (*s + *l) <= SPAN_GAP
                        && (a + len - 1) / segment_size == *s / segment_size =>
                {
                    (*l, *n) = (a + len - *s, *n + 1);
                }
                _ => spans.push((a, len, 1)),
            }
            span_of[i] = spans.len() - 1;
        }
        let read = spans.iter().map(|_| Span::Unread).collect();
        Spans {
            span_of,
            spans,
            read,
        }
    }

    /// The bytes of run `i` (at address `a`) onwards within its span, reading the span
    /// if this is its first run needed; `None` for a run to read alone: one alone in its
    /// span, or one whose span could not be read whole (a gap the checksum table does
    /// not record as written should not happen; read alone, the run says what is wrong).
    fn bytes(
        &mut self,
        read: impl Fn(u64, &mut [u8]) -> Result<()>,
        i: usize,
        a: u64,
    ) -> Option<&[u8]> {
        let k = self.span_of[i];
        let (s, l, n) = self.spans[k];
        if n == 1 {
            return None;
        }
        if matches!(self.read[k], Span::Unread) {
            let mut bytes = vec![0; l as usize];
            self.read[k] = match read(s, &mut bytes) {
                Ok(()) => Span::Read(bytes),
                Err(_) => Span::Apart,
            };
        }
        match &self.read[k] {
            Span::Read(bytes) => Some(&bytes[(a - s) as usize..]),
            Span::Unread | Span::Apart => None,
        }
    }
}

/// Where a range of a [`FlexSpace`] lay in its data file when a read found it in one
/// piece inside one segment ([`FlexSpace::read_self_checked_while`]): a caller that
/// keeps it can read the range again with [`FlexSpace::read_spot_while`], without a
/// search of the tree, for as long as nothing it keeps track of changed the range.
///
/// The space vouches only for the bytes at the spot: they stay what they were until
/// their segment is freed (checked on every read: the segment's opening count and
/// state). That the range still holds those bytes is the caller's to know: it must
/// drop the spot whenever it changes the range's content. Moves that keep the content
/// (garbage collection, [`FlexSpace::rewrite`], defragmentation) leave the old copy
/// where it was until its segment is freed, so they need no such care.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spot {
    pub(crate) addr: u64,
    /// The segment's opening count when the read found the range there.
    pub(crate) opened: u32,
}

/// What a reader may keep of where a range lay when it read it, to read it again with
/// less work: its [`Spot`] if it lay in one piece inside one segment (no tree at all),
/// or else a [`Hint`] to where the tree's walk of it starts (no descent). A spot holds
/// until the range's content changes (the keeper's to know) or its segment is freed; a
/// hint until the tree's leaf it points into changes, and only for the offset the
/// range's first byte has now. From [`FlexSpace::read_while`] and [`Cursor::shortcut`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shortcut {
    /// The range lay in one piece.
    Spot(Spot),
    /// Where the walk of the range's extents starts.
    Hint(Hint),
}

/// What [`FlexSpace::read_while`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeRead {
    /// How many extents map the whole range, read or not (1 for a spot).
    pub extents: usize,
    /// How many bytes of the buffer were filled.
    pub filled: usize,
    /// The range's shortcut now: the one given if it held.
    pub shortcut: Option<Shortcut>,
    /// Whether the shortcut given held and the read went by it.
    pub used: bool,
}

/// Reads of ranges in logical order with one walk of the tree's extents for all of
/// them, from [`FlexSpace::cursor`]: a read that starts where the one before it ended
/// takes its runs from where that one stopped, where a read on its own searches the
/// tree from the root. A scan reads intervals that lie end to end; at 10M pairs the
/// search was a quarter of a read's time (docs/design.md, "Spots").
pub struct Cursor<'a> {
    space: &'a FlexSpace,
    extents: crate::flextree::Extents<'a>,
    /// The extent holding `off`, if any.
    current: Option<crate::flextree::Extent>,
    /// Where the last range asked for ended.
    off: u64,
    runs: Vec<Run>,
}

impl Cursor<'_> {
    /// The [`Shortcut`] of the `len` bytes after the ranges asked for so far: their spot
    /// if they lie in one piece inside one segment, else a hint to where they start.
    pub fn shortcut(&mut self, len: u64) -> Option<Shortcut> {
        let hint = self
            .current
            .filter(|e| e.offset <= self.off && self.off < e.offset + e.len)
            .and_then(|e| self.space.tree.hint_at(&self.extents, self.off, &e));
        self.take_runs(len);
        match self.space.spot_of(&self.runs) {
            Some(spot) => Some(Shortcut::Spot(spot)),
            None => hint.map(Shortcut::Hint),
        }
    }

    /// [`Cursor::shortcut`] of the `len` bytes at `off`: where the ranges asked for so
    /// far did not end at `off`, the walk starts again there (one search of the tree).
    pub fn shortcut_at(&mut self, off: u64, len: u64) -> Option<Shortcut> {
        if off != self.off {
            self.start_at(off, None);
        }
        self.shortcut(len)
    }

    /// Starts the walk again at `off`, at `hint` if it still holds, else by a search.
    fn start_at(&mut self, off: u64, hint: Option<Hint>) {
        self.extents = self.space.tree.extents_hinted(off, hint).0;
        self.current = self.extents.next();
        self.off = off;
    }

    /// Moves the cursor past the `len` bytes at `off` without reading them, if it is
    /// at `off` (a reader that got them elsewhere keeps its walk going); otherwise the
    /// next read searches the tree.
    pub fn pass(&mut self, off: u64, len: u64) {
        if off == self.off {
            self.take_runs(len);
        }
    }

    /// [`FlexSpace::read_self_checked`] of `buf.len()` bytes at `off`, continuing the
    /// walk if `off` is where the last read ended, and otherwise starting it at the hint
    /// `shortcut` holds, if it holds (`off` must be where the hinted byte lies now, as
    /// for [`FlexSpace::read_while`]). Returns how many extents hold the range and its
    /// [`Shortcut`].
    pub fn read_self_checked(
        &mut self,
        off: u64,
        buf: &mut [u8],
        shortcut: Option<Shortcut>,
    ) -> Result<(usize, Option<Shortcut>)> {
        self.space
            .tree
            .check_range("query", off, buf.len() as u64)?;
        if off != self.off {
            let hint = match shortcut {
                Some(Shortcut::Hint(h)) => Some(h),
                _ => None,
            };
            self.start_at(off, hint);
        }
        let shortcut = self.shortcut(buf.len() as u64);
        self.space.fill_runs_of(&self.runs, buf, false, |_| true)?;
        Ok((self.runs.len(), shortcut))
    }

    /// The runs of the `len` bytes from where the cursor is into `runs`; the cursor
    /// moves past them. (Past the space's end there are none.)
    fn take_runs(&mut self, len: u64) {
        self.runs.clear();
        let (from, to) = (self.off, self.off + len);
        self.off = to;
        while let Some(e) = self.current {
            let end = e.offset + e.len;
            if e.offset >= to {
                break;
            }
            if end > from {
                let (a, b) = (from.max(e.offset), to.min(end));
                self.runs.push(Run {
                    addr: e.addr.map(|x| x + (a - e.offset)),
                    len: b - a,
                });
            }
            if end > to {
                // The next range starts in this extent.
                break;
            }
            self.current = self.extents.next();
        }
    }
}

/// Fills `buf` with the bytes of `runs` (a range's pieces in logical order; holes read
/// as zeros), after each run asking `more` (given the bytes filled so far) whether to
/// go on; returns how many bytes were filled. With `spanned`, runs that share a span
/// ([`Spans`]) come from one `read_span` of it; every other run is one `read_run`.
fn fill_runs(
    runs: &[Run],
    segment_size: u64,
    spanned: bool,
    buf: &mut [u8],
    read_span: impl Fn(u64, &mut [u8]) -> Result<()>,
    read_run: impl Fn(u64, &mut [u8]) -> Result<()>,
    mut more: impl FnMut(&[u8]) -> bool,
) -> Result<usize> {
    let mut spans = (spanned && runs.len() > 1).then(|| Spans::new(runs, segment_size));
    let mut at = 0usize;
    for (i, &Run { addr, len }) in runs.iter().enumerate() {
        let piece = &mut buf[at..at + len as usize];
        match addr {
            None => piece.fill(0),
            Some(a) => match spans.as_mut().and_then(|sp| sp.bytes(&read_span, i, a)) {
                Some(bytes) => piece.copy_from_slice(&bytes[..piece.len()]),
                None => read_run(a, piece)?,
            },
        }
        at += len as usize;
        if !more(&buf[..at]) {
            break;
        }
    }
    Ok(at)
}

/// Options of a [`FlexSpace`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SpaceOptions {
    /// Size of a data segment in bytes: a power of two from 64 KiB to 1 GiB.
    pub segment_size: u64,
    /// Largest extent in bytes, at most 1/4 of a segment (the paper's 1/K rule with
    /// K = 32 by default): garbage collection can then always free space.
    pub max_extent: u64,
    /// After a sync leaves the log with more than this many bytes' worth of entries,
    /// the tree is checkpointed and the log starts over (but see
    /// `log_grows_with_tree`). An entry counts 40 bytes here, what it took in the log's
    /// versions 1 and 2, though it now takes about 5: the limit bounds the entries a
    /// replay after a crash applies, which is what it costs.
    pub log_capacity: u64,
    /// Lets the log grow, before a checkpoint, to twice as many bytes' worth of entries
    /// (as `log_capacity` counts them) as the tree's last checkpoint took, when that
    /// is more than `log_capacity`. Scattered changes dirty most of a large tree's
    /// leaves, so a checkpoint costs about the whole tree; with a fixed capacity a
    /// large space rewrote its tree more often than it wrote data. This bounds the
    /// tree's writes to about half the log's worth of entries, and the replay after a
    /// crash to about two trees' worth of them. On by default; tests that want
    /// frequent checkpoints turn it off.
    pub log_grows_with_tree: bool,
    /// An optional limit on the data file's size; writes that would need more fail with
    /// [`Error::NoSpace`] and change nothing.
    pub max_data_size: Option<u64>,
    /// The space amplification garbage collection holds the data file to: a write first
    /// runs a GC pass once the used segments hold more than this many times the live
    /// bytes (and at least four segments of garbage). At least 1.1; lower keeps the
    /// file smaller and relocates more. Default 1.5, as the value log's GC.
    pub gc_space_amplification: f64,
    /// Reads the data file through a shared read-only mapping ([`crate::io::Window`])
    /// where the file system offers one, instead of a `pread` each: a read of bytes in
    /// the page cache is then a copy, with no system call. The pages read count in the
    /// process's resident set (as a memory-mapped engine's do) while the kernel keeps
    /// them mapped; they are the page cache's, which a `pread` fills as well. On by
    /// default.
    pub map_data: bool,
    /// Node capacities of the FlexTree.
    pub tree: FlexTreeOptions,
}

impl Default for SpaceOptions {
    fn default() -> Self {
        SpaceOptions {
            segment_size: 4 << 20,
            max_extent: 128 << 10,
            log_capacity: 4 << 20,
            log_grows_with_tree: true,
            max_data_size: None,
            gc_space_amplification: 1.5,
            map_data: true,
            tree: FlexTreeOptions::default(),
        }
    }
}

impl SpaceOptions {
    fn validate(&self) -> Result<()> {
        let s = self.segment_size;
        if !s.is_power_of_two() || !(64 << 10..=1 << 30).contains(&s) {
            return Err(Error::invalid(format!(
                "segment_size {s} must be a power of two from 64 KiB to 1 GiB"
            )));
        }
        if self.max_extent == 0 || self.max_extent > s / 4 {
            return Err(Error::invalid(format!(
                "max_extent {} must be 1..={} (a quarter segment)",
                self.max_extent,
                s / 4
            )));
        }
        if self.tree.leaf_capacity > treefile::MAX_LEAF_CAPACITY
            || self.tree.internal_capacity > treefile::MAX_INTERNAL_CAPACITY
        {
            return Err(Error::invalid(format!(
                "tree capacities {:?} exceed what a {}-byte page holds ({} / {})",
                self.tree,
                treefile::PAGE,
                treefile::MAX_LEAF_CAPACITY,
                treefile::MAX_INTERNAL_CAPACITY
            )));
        }
        let amp = self.gc_space_amplification;
        if !(amp >= 1.1 && amp.is_finite()) {
            return Err(Error::invalid(format!(
                "gc_space_amplification {amp} must be a number of at least 1.1"
            )));
        }
        if let Some(max) = self.max_data_size {
            if max < 4 * s {
                return Err(Error::invalid(format!(
                    "max_data_size {max} must hold at least 4 segments"
                )));
            }
        }
        Ok(())
    }

    /// K of the paper's 1/K rule.
    fn k(&self) -> u64 {
        self.segment_size / self.max_extent
    }
}

/// Counters of a [`FlexSpace`] since it was opened, for write amplification and GC work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpaceStats {
    /// Bytes given to `write` and `insert`.
    pub user_bytes: u64,
    /// Bytes written to the data file (user data and GC relocations).
    pub data_bytes_written: u64,
    /// Bytes written to the logical log.
    pub log_bytes_written: u64,
    /// Bytes written to the FlexTree file.
    pub tree_bytes_written: u64,
    /// Bytes that some extent maps to (what the space holds, holes excluded).
    pub live_bytes: u64,
    /// Bytes of the data file taken by segments that are not free.
    pub used_bytes: u64,
    /// Segments in the data file, and how many of them are free.
    pub segments: u64,
    /// Free segments.
    pub free_segments: u64,
    /// Extents in the FlexTree.
    pub extents: u64,
    /// Bytes of memory the FlexTree takes (counted when [`FlexSpace::stats`] is called).
    pub tree_memory_bytes: u64,
    /// Garbage-collection passes, bytes they moved, and segments they freed.
    pub gc_passes: u64,
    /// Of `gc_passes`: those a change ran itself, before writing, with the space held
    /// exclusively throughout (the others ran in steps: [`FlexSpace::gc_plan`]).
    pub gc_passes_in_changes: u64,
    /// Bytes relocated by garbage collection.
    pub gc_bytes_relocated: u64,
    /// Segments freed by garbage collection.
    pub gc_segments_freed: u64,
    /// Checkpoints of the FlexTree file.
    pub checkpoints: u64,
}

/// The last data block [`FlexSpace::read_data_through`] read and verified: its index and
/// its checksummed bytes.
#[derive(Default)]
pub(super) struct BlockReader {
    block: Option<u64>,
    bytes: Vec<u8>,
}

/// A persistent flexible address space. See the [module documentation](self).
///
/// Dropping a `FlexSpace` syncs what it can, best effort; call [`FlexSpace::close`] to
/// learn whether that worked (and to checkpoint, so the next open replays nothing).
pub struct FlexSpace {
    opts: SpaceOptions,
    dir: PathBuf,
    data: Arc<dyn VfsFile>,
    /// The data file mapped, if `map_data` and the file system allow: reads of bytes
    /// in the file (below `Segments::file_len`) copy from it. It reaches past the file
    /// and is mapped again larger when the file outgrows it ([`FlexSpace::fit_window`]).
    window: Option<Arc<Window>>,
    /// One count per [`SpaceView`] alive beside this one: while there is any, segments
    /// that become free are held ([`segments::State::Held`]), as a view may read them.
    view_pins: Arc<()>,
    log_file: Arc<dyn VfsFile>,
    /// The log and the tree file, which only the space's writer touches, in a mutex
    /// that is never contended, so that a sync's middle step
    /// ([`sync_data`](FlexSpace::sync_data)) writes them with shared access, beside
    /// readers of the tree.
    meta: parking_lot::Mutex<Meta>,
    tree: FlexTree,
    segs: Segments,
    /// Checksums of the data file's blocks, and those not yet logged.
    table: CrcTable,
    sum_ops: Vec<LogOp>,
    stats: SpaceStats,
    poisoned: bool,
    /// Between `sync_begin` and `sync_finish` (the space counts as poisoned then).
    syncing: bool,
    /// Set by a successful `close`, so that dropping does not sync again.
    closed: bool,
    /// Counts the calls that may change the space (every one goes through `guarded`),
    /// so that a [`GcPlan`] knows whether the space changed since it was made.
    changes: u64,
    /// This opening of the space, among all in the process: a [`GcPlan`] belongs to
    /// the one that made it.
    opening: u64,
    _lock: FileLock,
}

/// What [`FlexSpace::meta`] holds.
struct Meta {
    log: LogWriter,
    treefile: TreeFile,
    /// Whether the sync under way wrote a checkpoint whose last step
    /// ([`TreeFile::checkpointed`]) `sync_finish` takes, with exclusive access.
    checkpointed: bool,
}

impl std::fmt::Debug for FlexSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlexSpace")
            .field("dir", &self.dir)
            .field("len", &self.tree.len())
            .field("extents", &self.tree.extent_count())
            .finish()
    }
}

/// Reads exactly `buf.len()` bytes at `at`; a file that ends first is corrupt (something
/// durable says those bytes are there).
pub(crate) fn read_or_corrupt(file: &dyn VfsFile, buf: &mut [u8], at: u64) -> Result<()> {
    match file.read_exact_at(buf, at) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err(Error::corruption(
                file.path(),
                at,
                "the file ends before bytes that are recorded as written",
            ))
        }
        r => r,
    }
}

/// Applies one logged change to the tree: the one path both live changes and replay take.
fn apply(tree: &mut FlexTree, op: LogOp, max_extent: u64) -> Result<()> {
    match op {
        LogOp::Insert { off, len, addr } => tree.insert_merging(off, len, addr, max_extent),
        LogOp::Collapse { off, len } => tree.collapse(off, len),
        LogOp::Overwrite { off, len, addr } => tree.overwrite(off, len, Some(addr)),
        LogOp::Remap { off, len, old, new } => tree.remap(off, len, old, new),
        LogOp::Tag { off, tag } => tree.set_tag(off, tag),
        LogOp::InsertHole { off, len } => tree.insert_hole(off, len),
        LogOp::BlockSum { .. } => Ok(()), // the checksum table's, not the tree's
    }
}

impl FlexSpace {
    /// Opens the space in `dir` (created if missing), recovering it after a crash: the
    /// newest valid checkpoint of the tree, then the log entries written on top of it, up
    /// to the first torn or damaged block. A second open of the same directory fails
    /// with [`Error::Locked`] until the first is dropped.
    pub fn open(vfs: Arc<dyn Vfs>, dir: impl AsRef<Path>, opts: SpaceOptions) -> Result<FlexSpace> {
        opts.validate()?;
        let dir = dir.as_ref().to_path_buf();
        vfs.create_dir_all(&dir)?;
        let lock = vfs.lock(&dir.join(LOCK_FILE))?;
        let data = vfs.open(&dir.join(DATA_FILE), OpenMode::Create)?;
        let tree_file = vfs.open(&dir.join(TREE_FILE), OpenMode::Create)?;
        let log_file = vfs.open(&dir.join(LOG_FILE), OpenMode::Create)?;
        vfs.sync_dir(&dir)?;
        let (treefile, mut tree, mut table) = TreeFile::open(tree_file, opts.tree)?;
        let contents = log::read(&*log_file)?;
        let mut log = LogWriter::new(contents.next_block, contents.ops.len() as u64);
        if contents.epoch.is_some_and(|e| e > treefile.seq()) {
            // A checkpoint's header is durable before the log restarts on top of it, so a
            // newer log means the newest header was lost: refuse rather than drop the log.
            return Err(Error::corruption(
                log_file.path(),
                16,
                format!(
                    "the log follows checkpoint {:?}, but the newest valid one is {}",
                    contents.epoch,
                    treefile.seq()
                ),
            ));
        }
        // A log of an older format is replayed as it reads, then replaced by a
        // checkpoint (below), so that every block after it is in the current format
        // under a header that says so: a build that knows only the older one then
        // refuses the log instead of misreading the newer blocks.
        let old_format = contents.epoch == Some(treefile.seq()) && contents.version < log::VERSION;
        // Opened read-only, the space changes nothing on disk: it replays the log as it
        // reads, appends nothing (so stale blocks past it do no harm), and neither
        // checkpoints nor restarts the log.
        let read_only = vfs.read_only();
        if contents.epoch == Some(treefile.seq()) {
            // Blocks past the last whole commit (a commit a crash tore, whose later
            // blocks the disk may have written before an earlier one) go before anything
            // is appended: the next commit reuses their numbers, and a stale block left
            // after it would read as part of it.
            let end = contents.next_block * log::BLOCK as u64;
            if !read_only && log_file.len()? > end {
                log_file.set_len(end)?;
                log_file.sync()?;
            }
            for (i, op) in contents.ops.into_iter().enumerate() {
                if let LogOp::BlockSum { block, fill, crc } = op {
                    table.set(block, BlockSum { fill, crc });
                }
                apply(&mut tree, op, opts.max_extent).map_err(|e| {
                    Error::corruption(
                        log_file.path(),
                        0,
                        format!("log entry {i} ({op:?}) does not apply: {e}"),
                    )
                })?;
            }
        } else if !read_only {
            log.reset(&*log_file, treefile.seq())?;
        }
        let data_len = data.len()?;
        let mut live = Vec::new();
        for e in tree.extents() {
            let Some(addr) = e.addr else { continue };
            if addr + e.len > data_len {
                return Err(Error::corruption(
                    data.path(),
                    addr,
                    format!("extent {e:?} maps bytes past the data file's end {data_len}"),
                ));
            }
            add_live(&mut live, opts.segment_size, addr, e.len);
        }
        let segs = Segments::new(opts.segment_size, data_len, live);
        let mut space = FlexSpace {
            opts,
            dir,
            window: None,
            view_pins: Arc::new(()),
            data,
            log_file,
            meta: parking_lot::Mutex::new(Meta {
                log,
                treefile,
                checkpointed: false,
            }),
            tree,
            segs,
            table,
            sum_ops: Vec::new(),
            stats: SpaceStats::default(),
            poisoned: false,
            syncing: false,
            changes: 0,
            opening: {
                static OPENINGS: std::sync::atomic::AtomicU64 =
                    std::sync::atomic::AtomicU64::new(0);
                OPENINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
            // A read-only space is closed from the start: nothing is written when it
            // is closed or dropped.
            closed: read_only,
            _lock: lock,
        };
        space.refresh_stats();
        space.fit_window();
        if old_format && !read_only {
            space.checkpoint()?;
        }
        Ok(space)
    }

    /// The size of the space in bytes.
    pub fn len(&self) -> u64 {
        self.tree.len()
    }

    /// Whether the space is empty.
    pub fn is_empty(&self) -> bool {
        self.tree.is_empty()
    }

    /// Reads `buf.len()` bytes from `off`; the range must lie inside the space. Every
    /// data block the bytes come from is read whole and its checksum verified.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        self.read_runs(off, buf, true, None, |_| true).map(drop)
    }

    /// Reads like [`read`](Self::read), but only the bytes asked for and without the data
    /// blocks' checksums: for callers whose bytes carry checksums of their own, which they
    /// verify (the sorted keyspace's records). Reading a 300-byte extent then costs 300
    /// bytes, not the 4 KiB block around it and its CRC. Bytes the checksum table does not
    /// record as written are still refused with `Corruption`. Returns how many extents
    /// the bytes came from (as [`extents_in`](Self::extents_in) counts them, without a
    /// second search of the tree).
    pub fn read_self_checked(&self, off: u64, buf: &mut [u8]) -> Result<(usize, Option<Spot>)> {
        self.read_runs(off, buf, false, None, |_| true)
            .map(|(runs, _, spot, _)| (runs, spot))
    }

    /// Reads like [`read_self_checked`](Self::read_self_checked), filling `buf` one
    /// physically contiguous run at a time in logical order, and after each run asks
    /// `more` (given the bytes of `buf` filled so far) whether to go on: a caller looking
    /// for one record in a range stops where it finds it, and runs further on cost no
    /// read unless they share one with a run already needed (see `Spans`).
    /// Returns how many extents map the whole range, read or not (as
    /// [`read_self_checked`](Self::read_self_checked) does), how many bytes were
    /// filled, and, if the whole range lies in one piece inside one segment, its
    /// [`Spot`].
    pub fn read_self_checked_while(
        &self,
        off: u64,
        buf: &mut [u8],
        more: impl FnMut(&[u8]) -> bool,
    ) -> Result<(usize, usize, Option<Spot>)> {
        self.read_runs(off, buf, false, None, more)
            .map(|(runs, at, spot, _)| (runs, at, spot))
    }

    /// Reads like [`read_self_checked_while`](Self::read_self_checked_while) from
    /// `spot`, a range of `buf.len()` bytes that a read found there, with no search of
    /// the tree; `more` is asked after every `SPOT_STEP` bytes (with a window; else
    /// once, after one read of the whole range). Returns how many
    /// bytes were filled, or `None` (nothing read) if the spot's segment has been freed
    /// since, when its bytes may no longer be the range's. See [`Spot`] for what the
    /// caller must know for the bytes to be the range's still.
    pub fn read_spot_while(
        &self,
        spot: Spot,
        buf: &mut [u8],
        mut more: impl FnMut(&[u8]) -> bool,
    ) -> Result<Option<usize>> {
        let seg = self.segs.of(spot.addr);
        if !self.segs.holds(seg, spot.opened)
            || self.segs.of(spot.addr + (buf.len() as u64).max(1) - 1) != seg
        {
            return Ok(None);
        }
        // Without a window each step would be a system call: one does it all.
        let step = if self.window.is_some() {
            SPOT_STEP
        } else {
            buf.len()
        };
        let mut at = 0;
        while at < buf.len() {
            let to = buf.len().min(at + step);
            self.read_data_unverified(spot.addr + at as u64, &mut buf[at..to])?;
            at = to;
            if !more(&buf[..at]) {
                break;
            }
        }
        Ok(Some(at))
    }

    /// Asks the processor for the first things a read by `shortcut` will wait for: a
    /// spot's first bytes and their checksum entry, or a hint's leaf. A point read does
    /// this as soon as it has the shortcut, so that these waits overlap its others
    /// (the caches' admission counters) rather than following them.
    pub fn prefetch_shortcut(&self, shortcut: Shortcut) {
        match shortcut {
            Shortcut::Spot(spot) => {
                if let Some(w) = &self.window {
                    w.prefetch(spot.addr, 128);
                }
                self.table.prefetch(spot.addr / crc::BLOCK);
            }
            Shortcut::Hint(h) => self.tree.prefetch_hint(&h),
        }
    }

    /// Reads like [`read_self_checked_while`](Self::read_self_checked_while), by
    /// `shortcut` if it still holds (a [`Spot`] as
    /// [`read_spot_while`](Self::read_spot_while) reads it; a [`Hint`] with no descent
    /// of the tree), and says what the range's shortcut is now. See [`Spot`] and
    /// [`Hint`] for what the caller must know for a shortcut to be the range's: a spot's
    /// range must not have changed since, and `off` must be where a hint's range starts
    /// now.
    pub fn read_while(
        &self,
        off: u64,
        buf: &mut [u8],
        shortcut: Option<Shortcut>,
        mut more: impl FnMut(&[u8]) -> bool,
    ) -> Result<RangeRead> {
        let hint = match shortcut {
            Some(Shortcut::Spot(spot)) => {
                if let Some(filled) = self.read_spot_while(spot, buf, &mut more)? {
                    return Ok(RangeRead {
                        extents: 1,
                        filled,
                        shortcut,
                        used: true,
                    });
                }
                None
            }
            Some(Shortcut::Hint(h)) => Some(h),
            None => None,
        };
        let (extents, filled, spot, now) = self.read_runs(off, buf, false, hint, more)?;
        Ok(RangeRead {
            extents,
            filled,
            shortcut: match spot {
                Some(spot) => Some(Shortcut::Spot(spot)),
                None => now.map(Shortcut::Hint),
            },
            used: hint.is_some() && now == hint,
        })
    }

    /// A [`Cursor`] at offset 0: for reads (and spots) of ranges in logical order.
    pub fn cursor(&self) -> Cursor<'_> {
        let mut extents = self.tree.extents();
        Cursor {
            space: self,
            current: extents.next(),
            extents,
            off: 0,
            runs: Vec::new(),
        }
    }

    /// The spot of `runs`, the whole of a range: only if they are one run inside one
    /// segment.
    fn spot_of(&self, runs: &[Run]) -> Option<Spot> {
        let [Run { addr: Some(a), len }] = *runs else {
            return None;
        };
        let seg = self.segs.of(a);
        (len > 0 && self.segs.of(a + len - 1) == seg).then(|| Spot {
            addr: a,
            opened: self.segs.opened(seg),
        })
    }

    /// Reads run by run until `more` says stop, the walk of the tree's extents starting
    /// at `hint` if it holds ([`FlexTree::extents_hinted`]); returns the runs, the bytes
    /// read, the range's [`Spot`] if it has one and its hint now. An unverified read
    /// takes its runs by span ([`Spans`]); a verified one goes block by block anyway.
    fn read_runs(
        &self,
        off: u64,
        buf: &mut [u8],
        verify: bool,
        hint: Option<Hint>,
        more: impl FnMut(&[u8]) -> bool,
    ) -> Result<(usize, usize, Option<Spot>, Option<Hint>)> {
        let len = buf.len() as u64;
        self.tree.check_range("query", off, len)?;
        let (extents, now) = self.tree.extents_hinted(off, hint);
        let mut runs = Vec::new();
        crate::flextree::runs_of(extents, off, len, &mut runs);
        let at = self.fill_runs_of(&runs, buf, verify, more)?;
        Ok((runs.len(), at, self.spot_of(&runs), now))
    }

    /// Reads `runs` (the whole of a range, in logical order) into `buf` as
    /// [`FlexSpace::read_runs`] does; returns the bytes read.
    fn fill_runs_of(
        &self,
        runs: &[Run],
        buf: &mut [u8],
        verify: bool,
        more: impl FnMut(&[u8]) -> bool,
    ) -> Result<usize> {
        // An unverified read copies from the window: every run's first lines and its
        // checksum entry are asked for at once, so their misses overlap instead of
        // coming one run after another. (A hint never faults, so bytes the file does
        // not have yet need no test here; the copy makes it.)
        let windowed = self.window.as_ref().filter(|_| !verify);
        if let Some(w) = windowed {
            for (a, len) in runs.iter().filter_map(|r| r.addr.map(|a| (a, r.len))) {
                w.prefetch(a, len.min(128) as usize);
                self.table.prefetch(a / crc::BLOCK);
            }
        }
        fill_runs(
            runs,
            self.opts.segment_size,
            !verify && windowed.is_none(),
            buf,
            |s, b| self.read_data_unverified(s, b),
            |a, b| self.read_segments(a, b, verify),
            more,
        )
    }

    /// Reads data-file bytes at `addr` one segment at a time. An extent may run across a
    /// segment's end (an insert that filled the open segment continues at the start of the
    /// next, and the index merges the two physically adjacent pieces); until a sync, the
    /// second part may be only in the open segment's buffer, with no checksums in the
    /// table, while the first part is only in the file.
    fn read_segments(&self, mut addr: u64, mut out: &mut [u8], verify: bool) -> Result<()> {
        let size = self.opts.segment_size;
        while !out.is_empty() {
            let n = out.len().min(((addr / size + 1) * size - addr) as usize);
            let (part, rest) = out.split_at_mut(n);
            if verify {
                self.read_data(addr, part)?;
            } else {
                self.read_data_unverified(addr, part)?;
            }
            (addr, out) = (addr + n as u64, rest);
        }
        Ok(())
    }

    /// Refuses a read of data-file bytes that the checksum table does not record as
    /// written (block `block` must hold at least `need` bytes).
    fn check_fill(&self, block: u64, need: u64) -> Result<crc::BlockSum> {
        let sum = self.table.get(block);
        if u64::from(sum.fill) < need {
            return Err(Error::corruption(
                self.data.path(),
                block * crc::BLOCK,
                format!(
                    "block {block} has {} checksummed bytes, {need} are mapped",
                    sum.fill
                ),
            ));
        }
        Ok(sum)
    }

    /// Reads data-file bytes at `addr` with one read and no checksum (see
    /// [`read_self_checked`](Self::read_self_checked)).
    fn read_data_unverified(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        if self.segs.read_buffered(addr, out) {
            return Ok(());
        }
        let end = addr + out.len() as u64;
        let mut at = addr;
        while at < end {
            let block = at / crc::BLOCK;
            let start = block * crc::BLOCK;
            let upto = end.min(start + crc::BLOCK);
            self.check_fill(block, upto - start)?;
            at = upto;
        }
        // Bytes outside the open segment that the file has are not being written:
        // only a `&mut self` method writes the file, and segments are written only
        // while open.
        if let Some(w) = &self.window {
            if end <= self.segs.file_len() && w.copy_to(addr, out) {
                return Ok(());
            }
        }
        read_or_corrupt(&*self.data, out, addr)
    }

    /// Reads data-file bytes at `addr`: from the open segment's buffer if they are there,
    /// else from the file, verifying the checksum of every block touched.
    fn read_data(&self, addr: u64, out: &mut [u8]) -> Result<()> {
        self.read_data_through(addr, out, &mut BlockReader::default())
    }

    /// [`FlexSpace::read_data`], keeping the last block it verified in `last`, so that
    /// reads in address order verify each block once. Only for reads between which the
    /// space writes no block it may have kept: GC's, which read a pass's victims, closed
    /// segments, before it writes anything.
    pub(super) fn read_data_through(
        &self,
        addr: u64,
        out: &mut [u8],
        last: &mut BlockReader,
    ) -> Result<()> {
        if self.segs.read_buffered(addr, out) {
            return Ok(());
        }
        let (mut at, end) = (addr, addr + out.len() as u64);
        while at < end {
            let block = at / crc::BLOCK;
            let start = block * crc::BLOCK;
            let upto = end.min(start + crc::BLOCK);
            // The table says how much of the block is checksummed (and refuses a read
            // past it) whether or not the block is at hand.
            let sum = self.check_fill(block, upto - start)?;
            if last.block != Some(block) {
                last.block = None;
                last.bytes.resize(sum.fill as usize, 0);
                read_or_corrupt(&*self.data, &mut last.bytes, start)?;
                if crate::checksum::crc32c(&last.bytes) != sum.crc {
                    return Err(Error::corruption(
                        self.data.path(),
                        start,
                        format!("data block {block} checksum mismatch"),
                    ));
                }
                last.block = Some(block);
            }
            let o = (at - addr) as usize;
            out[o..o + (upto - at) as usize]
                .copy_from_slice(&last.bytes[(at - start) as usize..(upto - start) as usize]);
            at = upto;
        }
        Ok(())
    }

    /// FlexDB §5.4: the extent that holds `off` begins at some offset `<= off`; returns
    /// that offset, the extent's length, and up to `max_len` bytes from its start.
    pub fn read_extent(&self, off: u64, max_len: u64) -> Result<(u64, u64, Vec<u8>)> {
        let e = self.tree.lookup(off).ok_or_else(|| {
            Error::invalid(format!(
                "read_extent at {off} is outside the space of {} bytes",
                self.len()
            ))
        })?;
        let mut buf = vec![0u8; e.len.min(max_len) as usize];
        self.read(e.offset, &mut buf)?;
        Ok((e.offset, e.len, buf))
    }

    /// Maps the data file again if it has outgrown the window (or maps it the first
    /// time), to twice its length rounded up to a power of two and at least sixteen
    /// segments, so a growing file is mapped again a logarithmic number of times. A
    /// refused mapping keeps the old window, which still serves what it spans.
    pub(super) fn fit_window(&mut self) {
        if !self.opts.map_data {
            return;
        }
        let need = self.segs.file_len();
        if self.window.as_ref().is_some_and(|w| w.len() >= need) {
            return;
        }
        let len = need
            .saturating_mul(2)
            .checked_next_power_of_two()
            .unwrap_or(u64::MAX)
            .max(16 * self.opts.segment_size);
        if let Some(w) = self.data.map_window(len) {
            self.window = Some(Arc::new(w));
        }
    }

    /// How many bytes of the data file the window maps (0 without one): reads below
    /// both this and the file's length copy from memory.
    pub fn mapped_bytes(&self) -> u64 {
        self.window.as_ref().map_or(0, |w| w.len())
    }

    /// The tag of the extent that starts exactly at `off`, if one does.
    pub fn tag(&self, off: u64) -> Option<u8> {
        self.tree.tag_at(off)
    }

    /// The offset of the first tagged extent that starts at or after `off`, and its tag.
    /// The sorted keyspace finds its interval heads this way when it rebuilds its index.
    pub fn next_tagged(&self, off: u64) -> Option<(u64, u8)> {
        self.tree
            .extents_from(off)
            .find(|e| e.offset >= off && e.tag != 0)
            .map(|e| (e.offset, e.tag))
    }

    /// The most extents `len` bytes written at once can take (as [`defrag`](Self::defrag)
    /// writes them): one per maximal extent, and one more at each segment's end they
    /// may cross. A range in more extents than this is scattered.
    pub fn contiguous_extents(&self, len: u64) -> usize {
        let (max, seg) = (self.opts.max_extent.max(1), self.opts.segment_size.max(1));
        usize::try_from(len.div_ceil(max) + len.div_ceil(seg)).unwrap_or(usize::MAX)
    }

    /// How many extents map some byte of `[off, off + len)`: how scattered that range is.
    pub fn extents_in(&self, off: u64, len: u64) -> usize {
        self.tree
            .extents_from(off)
            .take_while(|e| e.offset < off.saturating_add(len))
            .count()
    }

    /// Into how many pieces `[off, off + len)` falls in the data file: one more at each
    /// place where the next byte is not the one after it in the file (a hole counts as
    /// a piece; no bytes, no piece). Extents that follow one another in the file, as a
    /// tag or the longest extent cuts them, are one piece.
    pub fn pieces_in(&self, off: u64, len: u64) -> usize {
        if len == 0 {
            return 0;
        }
        let end = off.saturating_add(len);
        let mut pieces = 0;
        let mut next: Option<u64> = None;
        for e in self.tree.extents_from(off).take_while(|e| e.offset < end) {
            let skip = off.saturating_sub(e.offset);
            let at = e.addr.map(|a| a + skip);
            if at.is_none() || at != next {
                pieces += 1;
            }
            next = e.addr.map(|a| a + e.len);
        }
        pieces
    }

    /// Bytes of memory the FlexTree holds (see [`SpaceStats::tree_memory_bytes`]); a
    /// walk of its nodes.
    pub fn tree_memory_bytes(&self) -> u64 {
        self.tree.memory_bytes()
    }

    /// The counters.
    pub fn stats(&self) -> SpaceStats {
        SpaceStats {
            tree_memory_bytes: self.tree_memory_bytes(),
            ..self.stats
        }
    }

    /// Checks the in-memory invariants (for tests): the index's, and that the segment
    /// table's live bytes agree with what the index maps.
    pub fn check(&self) -> std::result::Result<(), String> {
        self.tree.check()?;
        self.segs.check()?;
        let mapped: u64 = self
            .tree
            .extents()
            .filter(|e| e.addr.is_some())
            .map(|e| e.len)
            .sum();
        if mapped != self.segs.totals().0 {
            return Err(format!(
                "{mapped} bytes mapped, {} counted live",
                self.segs.totals().0
            ));
        }
        Ok(())
    }

    fn refresh_stats(&mut self) {
        let (live, used) = self.segs.totals();
        self.stats.live_bytes = live;
        self.stats.used_bytes = used;
        self.stats.segments = self.segs.count() as u64;
        self.stats.free_segments = self.segs.free_count() as u64;
        self.stats.extents = self.tree.extent_count();
        let meta = self.meta.get_mut();
        self.stats.log_bytes_written = meta.log.bytes_written;
        self.stats.tree_bytes_written = meta.treefile.bytes_written;
    }
}

/// Adds `len` live bytes at `addr` to per-segment counts, splitting at segment ends.
fn add_live(live: &mut Vec<u64>, seg_size: u64, mut addr: u64, mut len: u64) {
    while len > 0 {
        let seg = (addr / seg_size) as usize;
        let n = len.min((seg as u64 + 1) * seg_size - addr);
        if live.len() <= seg {
            live.resize(seg + 1, 0);
        }
        live[seg] += n;
        addr += n;
        len -= n;
    }
}

//! One interval of the sorted keyspace in memory: its bytes as the FlexSpace holds them,
//! where each record starts, a 16-bit fingerprint of each key (FlexDB §5.2), so a point
//! lookup compares keys only where the fingerprints match, and each key's *head* (its 4
//! bytes after the prefix all the interval's keys share, as the sparse index's nodes
//! keep them), so a seek's binary search compares numbers in the struct and reads a
//! key's bytes only where a head ties with the key sought. A seek read the bytes of
//! about four keys before, each on a line of its own: at 1M pairs, 1-pair scans ran
//! 1.2× and seekrandom 1.02× as fast with the heads, YCSB E level (docs/benchmarks.md,
//! sixtieth session). Where each key lies within its record is kept too, so a key is a
//! slice, not a header to decode, however often a search or a scan asks; with each
//! record's flags and the highest sequence among the records, so is an inline value
//! for a reader that sees them all.
//!
//! Invariants (checked by [`Loaded::parse`], which every interval read from the space
//! goes through): the bytes are whole records back to back, each with a good checksum,
//! and their keys strictly increase.

use smallvec::SmallVec;

use super::record::{inline_value, peek_seq_key, Record};
use crate::keyorder;
use crate::prefetch::prefetch;

/// Bytes of bookkeeping per record, for the cache's size accounting: its span, its
/// fingerprint and its head.
const PER_RECORD: usize = std::mem::size_of::<Span>() + 2 + 4;
/// Bytes of bookkeeping per interval: the struct and its reference counts, rounded up
/// to the allocator's block (mimalloc's blocks of this size come in 64-byte steps: 328
/// bytes take a 384-byte block).
const PER_INTERVAL: usize = (std::mem::size_of::<Loaded>() + 16).next_multiple_of(64);

/// The bytes an interval of `records` records costs the cache beyond its records.
pub(crate) fn overhead(records: usize) -> usize {
    PER_INTERVAL + PER_RECORD * records
}

/// Fingerprints and spans held in the interval's own allocation: an interval splits
/// past 16 records, so most need no other.
const INLINE_RECORDS: usize = 16;

/// Where a record and its key lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Span {
    start: u32,
    /// The key's length (keys are at most `MAX_KEY_LEN`, 4 KiB)...
    key_len: u16,
    /// ...and where it begins within its record (after the header, at most 31 bytes).
    key_off: u8,
    /// The record's flags (its first byte), in what was the struct's padding: with
    /// them and the next record's start, a scan finds an inline value without reading
    /// the record's header ([`Loaded::inline_at`]).
    flags: u8,
}

const _: () = assert!(std::mem::size_of::<Span>() == 8);

impl Span {
    /// The span of record `rec`, which starts at `start` and whose key is `key`.
    fn of(start: u32, rec: &[u8], key: &[u8]) -> Span {
        let off = key.as_ptr() as usize - rec.as_ptr() as usize;
        Span {
            start,
            key_len: u16::try_from(key.len()).unwrap_or_else(|_| unreachable!("keys are short")),
            key_off: u8::try_from(off).unwrap_or_else(|_| unreachable!("headers are short")),
            flags: rec[0],
        }
    }
}

/// Splits `bytes` into records, verifying each ([`Record::decode`]) and that their keys
/// increase, and hands each one's span to `push`; returns the highest sequence. `Err`
/// names the offset (within `bytes`) and what is wrong there.
fn parse_spans(bytes: &[u8], mut push: impl FnMut(Span)) -> Result<u64, (usize, String)> {
    let mut last: Option<&[u8]> = None;
    let mut max_seq = 0;
    let mut at = 0;
    while at < bytes.len() {
        let (r, n) = Record::decode(&bytes[at..]).map_err(|e| (at, e.to_string()))?;
        if last.is_some_and(|l| !keyorder::lt(l, r.key)) {
            return Err((at, "record keys are not in increasing order".into()));
        }
        if r.key.len() > usize::from(u16::MAX) {
            return Err((at, "a key longer than flexkv writes".into()));
        }
        last = Some(r.key);
        max_seq = max_seq.max(r.seq);
        push(Span::of(to_u32(at), &bytes[at..], r.key));
        at += n;
    }
    Ok(max_seq)
}

/// Verifies each record in `bytes` and that their keys increase, as loading an interval
/// does ([`parse_spans`]), keeping nothing; `Err` names the offset and what is wrong.
pub(crate) fn verify_records(bytes: &[u8]) -> Result<(), (usize, String)> {
    parse_spans(bytes, |_| {}).map(drop)
}

/// A decoded interval.
///
/// A point read touches the fingerprints, then one record's span, then its bytes: the
/// fingerprints and the spans (8 bytes each) sit in this struct, side by side, so a hit
/// costs the struct's lines and one cache miss beyond it (the record), not one per
/// array.
///
/// The fields are laid out in this order (`repr(C)`) so that what a cached hit touches
/// before anything else lies next to the `Arc`'s counts, which taking the interval
/// writes: the link a scan follows to the next interval, the CLOCK bit a read sets and
/// the mark a link's walk checks.
/// Left to the compiler they went to the struct's far end, two more cache misses per
/// interval a scan passes.
#[derive(Debug, Clone)]
#[repr(C)]
pub(crate) struct Loaded {
    /// The interval after this one, as a forward scan last found it cached.
    pub(crate) next: Next,
    /// The cache's CLOCK bit, here rather than in the cache's entry so that a cached
    /// read touches one structure fewer.
    pub(crate) referenced: Referenced,
    /// Whether this form is the cache's entry for its interval now (see [`Live`]).
    pub(crate) live: Live,
    /// Spread over more extents than half its records (FlexDB §5.2): rewrite it whole
    /// on its next update.
    pub(crate) fragmented: bool,
    /// How many leading bytes every key shares (at most 255: a longer shared prefix
    /// counts as 255, which costs only speed)...
    prefix: u8,
    /// ...and the first of them, if they are at most [`LEAD`].
    lead: [u8; LEAD],
    /// No record's sequence is above this: a reader at this sequence or later sees
    /// every record's version, and need not read the sequences one by one.
    max_seq: u64,
    /// Exactly the records' bytes (a boxed slice: no capacity word, and no room
    /// beyond them).
    bytes: Box<[u8]>,
    fps: SmallVec<[u16; INLINE_RECORDS]>,
    spans: SmallVec<[Span; INLINE_RECORDS]>,
    /// The 4 bytes of each key after `prefix` ([`head`]): a seek's binary search
    /// compares these, in the struct, and reads a key's bytes only where two are equal.
    /// Worked out for the intervals the committer builds and those the cache takes in
    /// ([`Loaded::with_heads`]), not for the many more a keyspace larger than the
    /// cache reads from the space once (empty then: a seek compares keys).
    heads: SmallVec<[u32; INLINE_RECORDS]>,
}

/// The longest shared prefix of an interval's keys kept in its struct (in what was the
/// padding before `bytes`); a longer one is read from its first key.
const LEAD: usize = 8;

/// The 4 bytes of `key` after its first `prefix`, zero-padded, as a big-endian number.
/// Among keys that share their first `prefix` bytes, heads keep the keys' order (a
/// shorter key padded with zeros never sorts above a longer one it is a prefix of):
/// where two heads differ, so do the keys, the same way.
pub(crate) fn head(key: &[u8], prefix: usize) -> u32 {
    let mut b = [0u8; 4];
    let rest = key.get(prefix..).unwrap_or_default();
    let n = rest.len().min(4);
    b[..n].copy_from_slice(&rest[..n]);
    u32::from_be_bytes(b)
}

/// How many leading bytes `a` and `b` share.
pub(crate) fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The key that `span` places in `bytes`.
fn span_key(bytes: &[u8], span: Span) -> &[u8] {
    let at = span.start as usize + usize::from(span.key_off);
    &bytes[at..at + usize::from(span.key_len)]
}

/// Two intervals are equal when their records are and both are (or neither is) marked
/// fragmented: the rest is bookkeeping about an interval, or worked out from its
/// records (the heads, which an interval read from the space gets only if it is
/// cached).
impl PartialEq for Loaded {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes
            && self.fps == other.fps
            && self.spans == other.spans
            && self.fragmented == other.fragmented
    }
}

impl Eq for Loaded {}

/// A CLOCK reference bit: set by a read, cleared by the cache's hand. Not part of an
/// interval's content: a clone starts unreferenced and equality ignores it.
#[derive(Debug, Default)]
pub(crate) struct Referenced(std::sync::atomic::AtomicBool);

impl Referenced {
    /// Marks the interval used (a plain load first, so a hot interval's cache line is
    /// not written on every read).
    pub(crate) fn set(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        if !self.0.load(Relaxed) {
            self.0.store(true, Relaxed);
        }
    }

    /// Whether the bit is set (leaving it as it is).
    pub(crate) fn is_set(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Clears the bit, returning whether it was set.
    pub(crate) fn take(&self) -> bool {
        self.0.swap(false, std::sync::atomic::Ordering::Relaxed)
    }
}

/// Implements `Clone` (a fresh default), `PartialEq` (always equal) and `Eq` for a
/// field that is bookkeeping about an interval, not part of its content.
macro_rules! not_content {
    ($t:ty) => {
        impl Clone for $t {
            fn clone(&self) -> Self {
                <$t>::default()
            }
        }

        impl PartialEq for $t {
            fn eq(&self, _: &Self) -> bool {
                true
            }
        }

        impl Eq for $t {}
    };
}

not_content!(Referenced);

/// Whether an interval's form is its cache entry: never yet, now, or no longer. The
/// cache makes a form live as it puts it in ([`IntervalCache::put`]) and retires it
/// as it goes, replaced or removed, never to be live again. Every change of an
/// interval's records replaces or removes its entry in the same write section, so a
/// form that is live holds its interval's records now, and has held them without a
/// change since it went in: that is what lets a link between two live forms outlive
/// the write sections that changed other intervals (see [`Next`]). The mark's loads
/// and stores are relaxed: a walk without the lock reads it inside an
/// [`Epoch::stable`] window, whose fences order it against the write sections.
///
/// [`Epoch::stable`]: super::store::Epoch::stable
/// [`IntervalCache::put`]: super::cache::IntervalCache::put
#[derive(Debug, Default)]
pub(crate) struct Live(std::sync::atomic::AtomicU8);

const NEW: u8 = 0;
const LIVE: u8 = 1;
const RETIRED: u8 = 2;

impl Live {
    /// Marks the form its interval's cache entry, unless it was one before.
    pub(crate) fn enter(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let _ = self.0.compare_exchange(NEW, LIVE, Relaxed, Relaxed);
    }

    /// Marks the form no longer its interval's cache entry, for good.
    pub(crate) fn retire(&self) {
        self.0.store(RETIRED, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether the form is its interval's cache entry now.
    pub(crate) fn is_live(&self) -> bool {
        self.0.load(std::sync::atomic::Ordering::Relaxed) == LIVE
    }
}

not_content!(Live);

/// A link from a cached interval to the cached interval after it, with the store
/// epoch it was made at (FlexDB §5.2 has each index entry point at its cached
/// interval; this points from neighbour to neighbour, which is what a scan follows).
/// A forward scan that comes to an interval whose link holds goes straight to the
/// next one: no hash of its key, no lookup in the cache's hash map (a cache miss
/// each) and no lock on a shard of it.
///
/// Why it is right: a scan makes a link only between two forms that hold their
/// intervals' records at that moment and lie side by side. The committer changes
/// intervals only in write sections, each of which moves the epoch on, and a scan
/// under the keyspace's read lock sees one epoch throughout. So a link made at epoch
/// `e` leads to the next interval's form at `e`, which still holds at `e`. After `e`
/// it holds while both forms are [`Live`]: an interval could come between them only
/// by taking keys from one of the two or by a key going into one of them, and either
/// change replaces or removes that one's cache entry in the write section that makes
/// it, which retires the form. So a write section that changes other intervals (a
/// small commit changes a few in a hundred) leaves the link alone, where the epoch
/// alone would have cut every link in the keyspace.
///
/// The link is weak, so it never keeps an evicted interval's records in memory, and
/// the cache clears it when the interval it leads to leaves
/// ([`IntervalCache`](super::cache::IntervalCache)), so it does not keep that
/// interval's struct allocated either. (A scan that links to an interval just as it
/// leaves can make a link the cache did not see: that keeps one struct's block, a few
/// hundred bytes, until the link is made again or this interval leaves too.) Not part
/// of an interval's content: a clone starts unlinked and equality ignores it.
#[derive(Debug, Default)]
pub(crate) struct Next(parking_lot::Mutex<Option<(u64, std::sync::Weak<Loaded>)>>);

impl Next {
    /// The next interval, if the link holds at `epoch` and it is still in memory: it
    /// was made at `epoch`, or it leads from a live form (`from_live`, the caller's
    /// word for the interval it asks) to a live one.
    pub(crate) fn get(&self, epoch: u64, from_live: bool) -> Option<std::sync::Arc<Loaded>> {
        let (e, next) = match &*self.0.lock() {
            Some((e, next)) if *e == epoch || from_live => (*e, next.upgrade()?),
            _ => return None,
        };
        (e == epoch || next.live.is_live()).then_some(next)
    }

    /// Asks the processor for the struct of the interval the link leads to (and the
    /// `Arc`'s counts before it), without taking it: a forward scan calls this as it
    /// takes an interval, so the next one's misses overlap the work on this one
    /// instead of following it. (A prefetch of a block a link no longer holds costs a
    /// line and is never a fault.)
    pub(crate) fn prefetch(&self) {
        if let Some((_, next)) = &*self.0.lock() {
            prefetch_struct(next.as_ptr());
        }
    }

    /// Links to `next`, the cached interval after this one at `epoch`.
    pub(crate) fn set(&self, epoch: u64, next: &std::sync::Arc<Loaded>) {
        *self.0.lock() = Some((epoch, std::sync::Arc::downgrade(next)));
    }

    /// Drops the link if it leads to `gone`, which is leaving the cache: a link kept
    /// would keep `gone`'s struct allocated (not its records).
    pub(crate) fn clear_if(&self, gone: &Loaded) {
        let mut link = self.0.lock();
        if link
            .as_ref()
            .is_some_and(|(_, next)| std::ptr::eq(next.as_ptr(), gone))
        {
            *link = None;
        }
    }
}

not_content!(Next);

/// Asks the processor for the struct of the interval at `l` and the `Arc`'s two counts,
/// which precede it in its block (taking it writes them), without reading either: `l`
/// may be an interval already gone (a hint never faults).
pub(crate) fn prefetch_struct(l: *const Loaded) {
    let counts = 2 * std::mem::size_of::<usize>();
    let start = l.cast::<u8>().wrapping_sub(counts);
    crate::prefetch::prefetch_bytes(start, counts + std::mem::size_of::<Loaded>());
}

/// The key fingerprint of FlexDB's interval cache.
pub(crate) fn fingerprint(key: &[u8]) -> u16 {
    let h = crate::checksum::crc32c(key);
    (h ^ (h >> 16)) as u16
}

/// An interval's records as the committer just laid them out, back to back, and where
/// each starts: what [`Loaded::from_parts`] makes a cached form of, made into one
/// ([`Laid::into_loaded`]) only where one is needed: for the cache, or for the merge
/// with a neighbour. Where the keyspace is larger than the cache, a commit changes
/// intervals the cache does not take, and their forms (a copy of the bytes, a
/// fingerprint per key, the heads) were built only to be dropped.
pub(crate) struct Laid<'a> {
    bytes: &'a [u8],
    starts: Vec<u32>,
}

impl<'a> Laid<'a> {
    /// Records `bytes`, which the committer encoded, starting at `starts`.
    pub(crate) fn new(bytes: &'a [u8], starts: Vec<u32>) -> Laid<'a> {
        Laid { bytes, starts }
    }

    pub(crate) fn len(&self) -> usize {
        self.starts.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.starts.is_empty()
    }

    /// The records' bytes.
    pub(crate) fn size(&self) -> usize {
        self.bytes.len()
    }

    /// What the cached form would cost the cache: [`Loaded::footprint`].
    pub(crate) fn footprint(&self) -> usize {
        overhead(self.len()) + self.size()
    }

    /// Where record `i` starts and ends.
    pub(crate) fn span(&self, i: usize) -> (usize, usize) {
        let end = self
            .starts
            .get(i + 1)
            .map_or(self.bytes.len(), |&e| e as usize);
        (self.starts[i] as usize, end)
    }

    /// Record `i`'s key.
    pub(crate) fn key(&self, i: usize) -> &'a [u8] {
        match peek_seq_key(&self.bytes[self.starts[i] as usize..]) {
            Ok((_, key)) => key,
            Err(_) => unreachable!("the committer encoded these records"),
        }
    }

    /// The record with key `key`: a binary search over the keys.
    pub(crate) fn find(&self, key: &[u8]) -> Option<usize> {
        find_sorted(self.len(), |i| self.key(i), key)
    }

    /// The cached form: [`Loaded::from_parts`] of a copy of the bytes.
    pub(crate) fn into_loaded(self) -> Loaded {
        Loaded::from_parts(self.bytes.to_vec(), self.starts)
    }
}

/// An interval's records as bytes and spans, borrowed: the committer's view of an
/// interval it read from the space into the slice's buffers ([`ReadBufs`]), or of a
/// cached one ([`Loaded::view`]). Where the keyspace is larger than the cache, most
/// intervals a commit changes are read, and a form of their own (an allocation of
/// their size, a fingerprint per key) was made for each only to be dropped once the
/// slice was applied.
#[derive(Clone, Copy)]
pub(crate) struct Read<'a> {
    bytes: &'a [u8],
    spans: &'a [Span],
}

impl<'a> Read<'a> {
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub(crate) fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The records' bytes.
    pub(crate) fn size(&self) -> usize {
        self.bytes.len()
    }

    /// Where record `i` starts and ends.
    pub(crate) fn span(&self, i: usize) -> (usize, usize) {
        let end = self
            .spans
            .get(i + 1)
            .map_or(self.bytes.len(), |e| e.start as usize);
        (self.spans[i].start as usize, end)
    }

    pub(crate) fn key(&self, i: usize) -> &'a [u8] {
        span_key(self.bytes, self.spans[i])
    }

    pub(crate) fn record(&self, i: usize) -> Record<'a> {
        let (start, end) = self.span(i);
        let s = self.spans[i];
        Record::decode_laid_out(
            &self.bytes[start..end],
            usize::from(s.key_off),
            usize::from(s.key_len),
        )
    }

    /// The record with key `key`: a binary search over the keys.
    pub(crate) fn find(&self, key: &[u8]) -> Option<usize> {
        find_sorted(self.len(), |i| self.key(i), key)
    }
}

/// Where one interval lies in a [`ReadBufs`].
pub(crate) struct ReadAt {
    bytes: std::ops::Range<usize>,
    spans: std::ops::Range<usize>,
}

/// The buffers the committer reads a slice's uncached intervals into, back to back,
/// kept from slice to slice ([`Read`]).
#[derive(Default)]
pub(crate) struct ReadBufs {
    bytes: Vec<u8>,
    spans: Vec<Span>,
}

impl ReadBufs {
    /// Empties the buffers, keeping at most `keep` bytes of room (an interval of large
    /// values grows them past what a usual slice needs).
    pub(crate) fn clear(&mut self, keep: usize) {
        self.bytes.clear();
        self.spans.clear();
        if self.bytes.capacity() > keep {
            self.bytes = Vec::new();
            self.spans = Vec::new();
        }
    }

    /// `size` zeroed bytes at the end, for a read to fill before [`ReadBufs::parse`].
    pub(crate) fn room(&mut self, size: usize) -> &mut [u8] {
        let start = self.bytes.len();
        self.bytes.resize(start + size, 0);
        &mut self.bytes[start..]
    }

    /// Splits the last `size` bytes (which [`ReadBufs::room`] gave) into records, as
    /// [`Loaded::parse`] does: `Err` names the offset within them and what is wrong.
    pub(crate) fn parse(&mut self, size: usize) -> Result<ReadAt, (usize, String)> {
        let start = self.bytes.len() - size;
        let first = self.spans.len();
        let spans = &mut self.spans;
        parse_spans(&self.bytes[start..], |s| spans.push(s))?;
        Ok(ReadAt {
            bytes: start..self.bytes.len(),
            spans: first..self.spans.len(),
        })
    }

    /// The interval at `at`.
    pub(crate) fn get(&self, at: &ReadAt) -> Read<'_> {
        Read {
            bytes: &self.bytes[at.bytes.clone()],
            spans: &self.spans[at.spans.clone()],
        }
    }
}

impl Loaded {
    /// The interval this one's link leads to, if the link holds at `epoch`: made at
    /// `epoch`, or from this form to another while both are live ([`Next::get`]).
    pub(crate) fn next_at(&self, epoch: u64) -> Option<std::sync::Arc<Loaded>> {
        self.next.get(epoch, self.live.is_live())
    }

    /// Splits `bytes` into records, verifying each; `Err` names the offset (within the
    /// interval) and what is wrong there.
    pub(crate) fn parse(bytes: Vec<u8>) -> Result<Loaded, (usize, String)> {
        let mut spans = SmallVec::new();
        let max_seq = parse_spans(&bytes, |s| spans.push(s))?;
        let bytes = if bytes.capacity() > bytes.len() {
            bytes.as_slice().to_vec()
        } else {
            bytes
        };
        let fps = spans
            .iter()
            .map(|&s| fingerprint(span_key(&bytes, s)))
            .collect();
        Ok(Loaded::assemble(
            bytes,
            fps,
            spans,
            SmallVec::new(),
            0,
            max_seq,
        ))
    }

    /// Builds an interval from records already encoded back to back (by the committer,
    /// which made them): `starts` are where each begins. The bytes are kept in an
    /// allocation of exactly their length (copied if `bytes` has room to spare): a
    /// cached interval lives long, and room reserved for building it would be memory
    /// the cache holds without using (two fifths more at 1M pairs: 166 MiB for 119).
    pub(crate) fn from_parts(mut bytes: Vec<u8>, starts: Vec<u32>) -> Loaded {
        if bytes.capacity() > bytes.len() {
            bytes = bytes.as_slice().to_vec();
        }
        let mut fps = SmallVec::with_capacity(starts.len());
        let mut spans = SmallVec::with_capacity(starts.len());
        let mut max_seq = 0;
        for &start in &starts {
            let rec = &bytes[start as usize..];
            let (seq, key) = match peek_seq_key(rec) {
                Ok(found) => found,
                Err(_) => unreachable!("records are verified before they become an interval"),
            };
            max_seq = max_seq.max(seq);
            fps.push(fingerprint(key));
            spans.push(Span::of(start, rec, key));
        }
        Loaded::heads_afresh(bytes, fps, spans, max_seq)
    }

    /// This interval with its keys' heads, worked out if it has none: for an interval
    /// read from the space that the cache takes in.
    pub(crate) fn with_heads(self) -> Loaded {
        if self.heads.len() == self.len() {
            return self;
        }
        let fragmented = self.fragmented;
        let mut l = Loaded::heads_afresh(self.bytes.into_vec(), self.fps, self.spans, self.max_seq);
        l.fragmented = fragmented;
        l
    }

    /// An interval of these records, its keys' shared prefix and heads worked out
    /// afresh (a slice or a concatenation shares a different prefix than its parts).
    fn heads_afresh(
        bytes: Vec<u8>,
        fps: SmallVec<[u16; INLINE_RECORDS]>,
        spans: SmallVec<[Span; INLINE_RECORDS]>,
        max_seq: u64,
    ) -> Loaded {
        let key = |s: &Span| span_key(&bytes, *s);
        // Sorted keys share exactly what the first and the last share; up to 255.
        let p = match (spans.first(), spans.last()) {
            (Some(first), Some(last)) => common_prefix(key(first), key(last)).min(255),
            _ => 0,
        };
        let heads = spans.iter().map(|s| head(key(s), p)).collect();
        Loaded::assemble(bytes, fps, spans, heads, p, max_seq)
    }

    /// The interval of these parts, whose keys all start with their first `prefix`
    /// bytes (at most 255) and whose records' sequences are at most `max_seq`.
    fn assemble(
        bytes: Vec<u8>,
        fps: SmallVec<[u16; INLINE_RECORDS]>,
        spans: SmallVec<[Span; INLINE_RECORDS]>,
        heads: SmallVec<[u32; INLINE_RECORDS]>,
        prefix: usize,
        max_seq: u64,
    ) -> Loaded {
        let mut lead = [0; LEAD];
        if let (Some(first), Some(to)) = (spans.first(), lead.get_mut(..prefix)) {
            to.copy_from_slice(&span_key(&bytes, *first)[..prefix]);
        }
        Loaded {
            bytes: bytes.into_boxed_slice(),
            fps,
            spans,
            heads,
            prefix: u8::try_from(prefix).unwrap_or_else(|_| unreachable!("capped at 255")),
            lead,
            max_seq,
            fragmented: false,
            referenced: Referenced::default(),
            live: Live::default(),
            next: Next::default(),
        }
    }

    /// Records `range` as an interval of their own.
    pub(crate) fn slice(&self, range: std::ops::Range<usize>) -> Loaded {
        if range.is_empty() {
            return Loaded::from_parts(Vec::new(), Vec::new());
        }
        let base = self.spans[range.start].start;
        let end = self.span(range.end - 1).1;
        Loaded::heads_afresh(
            self.bytes[base as usize..end].to_vec(),
            self.fps[range.clone()].into(),
            self.spans[range]
                .iter()
                .map(|s| Span {
                    start: s.start - base,
                    ..*s
                })
                .collect(),
            // The whole's bound holds for a part (a bound, not the part's own maximum).
            self.max_seq,
        )
    }

    /// This interval followed by `next`.
    pub(crate) fn concat(&self, next: &Loaded) -> Loaded {
        let base = to_u32(self.bytes.len());
        let mut bytes = Vec::with_capacity(self.bytes.len() + next.bytes.len());
        bytes.extend_from_slice(&self.bytes);
        bytes.extend_from_slice(&next.bytes);
        let mut fps = self.fps.clone();
        fps.extend_from_slice(&next.fps);
        let mut spans = self.spans.clone();
        spans.extend(next.spans.iter().map(|s| Span {
            start: s.start + base,
            ..*s
        }));
        Loaded::heads_afresh(bytes, fps, spans, self.max_seq.max(next.max_seq))
    }

    /// The number of records.
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// The interval's size in bytes.
    pub(crate) fn size(&self) -> usize {
        self.bytes.len()
    }

    /// The interval's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Its records as bytes and spans ([`Read`]).
    pub(crate) fn view(&self) -> Read<'_> {
        Read {
            bytes: &self.bytes,
            spans: &self.spans,
        }
    }

    /// Where record `i` starts and ends within the interval. This and
    /// [`Loaded::record`] are [`Read::span`] and [`Read::record`] of [`Loaded::view`]
    /// written out: readers and scans call them for every record, and a path through
    /// the view was not measured there.
    pub(crate) fn span(&self, i: usize) -> (usize, usize) {
        let start = self.spans[i].start as usize;
        let end = self
            .spans
            .get(i + 1)
            .map_or(self.bytes.len(), |e| e.start as usize);
        (start, end)
    }

    /// Asks for the cache lines of records `range` (and of their spans) before they are
    /// read: a scan calls this when it takes a run of an interval, so the lines' misses
    /// overlap each other and the work on the first records, where reading the records
    /// one after another would wait for each in turn.
    pub(crate) fn touch(&self, range: std::ops::Range<usize>) {
        if range.is_empty() {
            return;
        }
        let start = self.spans[range.start].start as usize;
        let end = self.span(range.end - 1).1;
        // Measured on `seekrandom` (1M pairs): hints into the first-level cache against
        // loads of each line, median 1.10× (twenty-eighth session); into the second-level
        // cache against the first, 1.09× (thirtieth; docs/benchmarks.md); the spans
        // too, 1.09× more (thirtieth).
        prefetch(&self.bytes[start..end]);
        prefetch(&self.spans[range]);
    }

    /// The key of record `i`.
    pub(crate) fn key(&self, i: usize) -> &[u8] {
        span_key(&self.bytes, self.spans[i])
    }

    /// Record `i`.
    pub(crate) fn record(&self, i: usize) -> Record<'_> {
        let (start, end) = self.span(i);
        let s = self.spans[i];
        let rec = &self.bytes[start..end];
        Record::decode_laid_out(rec, usize::from(s.key_off), usize::from(s.key_len))
    }

    /// A sequence no record's is above: a reader at it or later sees every record.
    pub(crate) fn max_seq(&self) -> u64 {
        self.max_seq
    }

    /// Where record `i`'s key and value lie in [`Loaded::bytes`], if its value is
    /// inline, found from its span and the next record's start alone: unlike
    /// [`Loaded::record`], no read of the record's own bytes (a scan's first touch of
    /// each record, a fifth of a 1M `seekrandom`'s reading thread), which a caller that
    /// knows every record's version visible to it (at a sequence at or after
    /// [`Loaded::max_seq`]) and wants only the pair does not need.
    pub(crate) fn inline_at(
        &self,
        i: usize,
    ) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
        let (start, end) = self.span(i);
        let s = self.spans[i];
        let key_start = start + usize::from(s.key_off);
        let key_end = key_start + usize::from(s.key_len);
        let value = inline_value(s.flags, key_end - start, end - start)?;
        Some((key_start..key_end, start + value.start..start + value.end))
    }

    /// The record with key `key`, found by fingerprint.
    pub(crate) fn find(&self, key: &[u8]) -> Option<usize> {
        let fp = fingerprint(key);
        self.fps
            .iter()
            .enumerate()
            .find(|&(i, &f)| f == fp && keyorder::eq(self.key(i), key))
            .map(|(i, _)| i)
    }

    /// The first record whose key is at or above `key` (`len()` if none): a binary
    /// search over the heads in the struct, which reads a key's bytes only where its
    /// head equals `key`'s.
    pub(crate) fn seek(&self, key: &[u8]) -> usize {
        let n = self.len();
        if self.heads.len() != n {
            // No heads (read from the space, not cached): the keys themselves.
            return partition(n, |i| self.key(i) < key);
        }
        if n == 0 {
            return 0;
        }
        // Every key starts with the same `prefix` bytes; a key that does not sorts
        // wholly before or after them.
        let p = usize::from(self.prefix);
        let theirs = match self.lead.get(..p) {
            Some(lead) => lead,
            None => &self.key(0)[..p],
        };
        match key[..p.min(key.len())].cmp(theirs) {
            std::cmp::Ordering::Less => return 0,
            std::cmp::Ordering::Greater => return n,
            std::cmp::Ordering::Equal => {}
        }
        let h = head(key, p);
        partition(n, |i| match self.heads[i].cmp(&h) {
            std::cmp::Ordering::Less => true,
            std::cmp::Ordering::Greater => false,
            std::cmp::Ordering::Equal => self.key(i) < key,
        })
    }

    /// Bytes of memory this interval takes, for the cache's budget.
    pub(crate) fn footprint(&self) -> usize {
        overhead(self.spans.len()) + self.bytes.len()
    }
}

/// Which of `n` keys in increasing order (`key_at`) is `key`: a binary search.
fn find_sorted<'k>(n: usize, key_at: impl Fn(usize) -> &'k [u8], key: &[u8]) -> Option<usize> {
    let i = partition(n, |i| keyorder::lt(key_at(i), key));
    (i < n && keyorder::eq(key_at(i), key)).then_some(i)
}

/// How many of `0..n` are `below`, which holds for a prefix of them.
fn partition(n: usize, below: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = (lo + hi) / 2;
        if below(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or_else(|_| unreachable!("intervals are far below 4 GiB"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sorted::RecordValue;
    use proptest::prelude::*;

    fn interval(keys: &[&[u8]]) -> Vec<u8> {
        let mut buf = Vec::new();
        for (i, k) in keys.iter().enumerate() {
            Record {
                seq: i as u64 + 1,
                key: k,
                value: RecordValue::Inline(b"v"),
                prior: None,
            }
            .encode(&mut buf);
        }
        buf
    }

    #[test]
    fn an_inline_pair_is_found_from_the_spans_where_the_record_says_and_sequences_are_bounded() {
        let ptr = |n: u32| crate::vlog::Pointer {
            segment: n,
            offset: u64::from(n) << 20,
            len: 100 + n,
            check: n,
        };
        let keys: [&[u8]; 6] = [b"a", b"bb", b"ccc", b"dddd", b"e", b"ffffff"];
        let values = [
            RecordValue::Inline(b"one"),
            RecordValue::Inline(b""),
            RecordValue::Tombstone,
            RecordValue::Separated(ptr(3)),
            RecordValue::Inline(b"five, with a prior version"),
            RecordValue::Inline(&[7; 300]),
        ];
        let seqs = [5, 900, 17, 1 << 40, 3, 250];
        let (mut buf, mut starts) = (Vec::new(), Vec::new());
        for i in 0..keys.len() {
            starts.push(buf.len() as u32);
            Record {
                seq: seqs[i],
                key: keys[i],
                value: values[i],
                prior: (i % 2 == 0).then(|| ptr(i as u32)),
            }
            .encode(&mut buf);
        }
        for l in [
            Loaded::parse(buf.clone()).unwrap(),
            Loaded::from_parts(buf, starts),
        ] {
            assert_eq!(l.max_seq(), 1 << 40);
            for i in 0..l.len() {
                let r = l.record(i);
                match (l.inline_at(i), r.value) {
                    (Some((k, v)), RecordValue::Inline(want)) => {
                        assert_eq!(&l.bytes()[k], r.key, "record {i}");
                        assert_eq!(&l.bytes()[v], want, "record {i}");
                    }
                    (None, RecordValue::Tombstone | RecordValue::Separated(_)) => {}
                    (got, want) => panic!("record {i}: {got:?} for {want:?}"),
                }
            }
            // Parts and joins keep each record's flags with its span; a part keeps the
            // whole's bound (a bound: never below a record's sequence), a join the larger.
            let (front, back) = (l.slice(0..3), l.slice(4..6));
            assert_eq!(front.max_seq(), 1 << 40);
            assert!((0..front.len()).all(|i| front.record(i).seq <= front.max_seq()));
            let (k, v) = front.inline_at(1).unwrap();
            assert_eq!(
                (&front.bytes()[k], &front.bytes()[v]),
                (&b"bb"[..], &b""[..])
            );
            let (k, v) = back.inline_at(0).unwrap();
            assert_eq!(
                (&back.bytes()[k], &back.bytes()[v]),
                (&b"e"[..], &b"five, with a prior version"[..])
            );
            let joined = front.concat(&back);
            assert_eq!(joined.max_seq(), 1 << 40);
            let before = Loaded::parse(interval(&[b"0"])).unwrap();
            assert_eq!(
                before.concat(&l).max_seq(),
                1 << 40,
                "the larger of the two"
            );
            assert_eq!(joined.len(), 5);
            assert_eq!(joined.inline_at(2), None, "a tombstone");
            let (k, v) = joined.inline_at(4).unwrap();
            assert_eq!(
                (&joined.bytes()[k], &joined.bytes()[v]),
                (&b"ffffff"[..], &[7; 300][..])
            );
        }
        let lone = Loaded::parse(interval(&[b"x", b"y", b"z"])).unwrap();
        assert_eq!(lone.max_seq(), 3);
        assert_eq!(lone.with_heads().max_seq(), 3);
        assert_eq!(Loaded::parse(Vec::new()).unwrap().max_seq(), 0);
    }

    #[test]
    fn a_link_leads_on_at_its_epoch_or_between_live_forms_and_never_keeps_its_interval() {
        let a = Loaded::parse(interval(&[b"a"])).unwrap();
        let b = std::sync::Arc::new(Loaded::parse(interval(&[b"b"])).unwrap());
        assert!(a.next.get(4, true).is_none(), "a new interval is unlinked");
        a.next.set(4, &b);
        let got = a
            .next
            .get(4, false)
            .expect("the link leads on at its epoch");
        assert!(std::sync::Arc::ptr_eq(&got, &b));
        drop(got);
        // The epoch moved on: the link holds only from a live form to a live form.
        assert!(a.next.get(6, false).is_none());
        assert!(a.next.get(6, true).is_none(), "b was never cached");
        b.live.enter();
        assert!(b.live.is_live());
        assert!(a.next.get(6, false).is_none(), "a is not live");
        assert!(a.next.get(6, true).is_some());
        b.live.retire();
        assert!(a.next.get(6, true).is_none(), "b left the cache");
        b.live.enter();
        assert!(!b.live.is_live(), "a form that left never comes back");
        assert!(a.next.get(4, false).is_some(), "its own epoch still holds");
        // A clone and an equal interval do not share or compare the link or the mark.
        assert!(a.clone().next.get(4, true).is_none());
        assert!(!b.as_ref().clone().live.is_live());
        assert_eq!(a.clone(), a);
        // Only a link to the interval leaving is cleared.
        let c = Loaded::parse(interval(&[b"c"])).unwrap();
        a.next.clear_if(&c);
        assert!(a.next.get(4, false).is_some());
        a.next.clear_if(&b);
        assert!(a.next.get(4, false).is_none());
        // The link is weak: the interval it led to goes with its last holder.
        a.next.set(4, &b);
        drop(b);
        assert!(a.next.get(4, false).is_none());
    }

    #[test]
    fn finds_and_seeks_by_key() {
        let keys: [&[u8]; 4] = [b"b", b"d", b"f", b"h"];
        let iv = Loaded::parse(interval(&keys)).unwrap();
        assert_eq!(iv.len(), 4);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(iv.find(k), Some(i));
            assert_eq!(iv.key(i), *k);
            assert_eq!(iv.record(i).seq, i as u64 + 1);
        }
        assert_eq!(iv.find(b"c"), None);
        assert_eq!(iv.seek(b"a"), 0);
        assert_eq!(iv.seek(b"d"), 1);
        assert_eq!(iv.seek(b"e"), 2);
        assert_eq!(iv.seek(b"z"), 4);
        let (s, e) = iv.span(3);
        assert_eq!(e, iv.size());
        assert!(s < e);
        let starts = iv.spans.iter().map(|s| s.start).collect();
        let rebuilt = Loaded::from_parts(iv.bytes().to_vec(), starts);
        assert_eq!(rebuilt, iv);
        let (a, b) = (iv.slice(0..1), iv.slice(1..4));
        assert_eq!((a.len(), b.len(), b.key(0)), (1, 3, &b"d"[..]));
        assert_eq!(a.concat(&b), iv);
        assert_eq!(Loaded::parse(b.bytes().to_vec()).unwrap(), b);
        assert_eq!(iv.slice(2..2).len(), 0);
    }

    #[test]
    fn a_laid_interval_answers_as_its_cached_form_does() {
        let keys: [&[u8]; 5] = [b"b", b"bb", b"d\0", b"f", &[b'h'; 300]];
        let bytes = interval(&keys);
        let whole = Loaded::parse(bytes.clone()).unwrap();
        let starts: Vec<u32> = whole.spans.iter().map(|s| s.start).collect();
        let laid = Laid::new(&bytes, starts.clone());
        assert_eq!((laid.len(), laid.size()), (whole.len(), whole.size()));
        assert_eq!(laid.footprint(), whole.footprint());
        for (i, &key) in keys.iter().enumerate() {
            assert_eq!(laid.key(i), key);
            assert_eq!(laid.span(i), whole.span(i));
            assert_eq!(laid.find(key), Some(i));
        }
        for missing in [&b"a"[..], b"ba", b"c", b"d", b"d\0\0", b"g", b"z"] {
            assert_eq!(laid.find(missing), None, "{missing:?}");
        }
        assert_eq!(
            laid.into_loaded(),
            Loaded::from_parts(bytes.clone(), starts)
        );
        let empty = Laid::new(&[], Vec::new());
        assert!(empty.is_empty());
        assert_eq!(empty.find(b"a"), None);
        assert_eq!(
            empty.footprint(),
            Loaded::from_parts(Vec::new(), Vec::new()).footprint()
        );
    }

    #[test]
    fn intervals_read_back_to_back_answer_as_their_cached_forms_do() {
        let a: [&[u8]; 5] = [b"b", b"bb", b"d\0", b"f", &[b'h'; 300]];
        let b: [&[u8]; 3] = [b"k", b"ka", b"m"];
        let mut bufs = ReadBufs::default();
        let mut at = Vec::new();
        for keys in [&a[..], &[], &b[..]] {
            let bytes = interval(keys);
            bufs.room(bytes.len()).copy_from_slice(&bytes);
            at.push((bufs.parse(bytes.len()).unwrap(), keys, bytes));
        }
        for (at, keys, bytes) in &at {
            let read = bufs.get(at);
            let whole = Loaded::parse(bytes.clone()).unwrap();
            assert_eq!((read.len(), read.bytes()), (whole.len(), whole.bytes()));
            assert_eq!(read.is_empty(), keys.is_empty());
            for (i, &key) in keys.iter().enumerate() {
                assert_eq!(read.key(i), key);
                assert_eq!(read.span(i), whole.span(i));
                assert_eq!(read.record(i), whole.record(i));
                assert_eq!(read.find(key), Some(i));
            }
            for missing in [&b"a"[..], b"ba", b"c", b"d", b"g", b"ka\0", b"l", b"z"] {
                assert_eq!(read.find(missing), None, "{missing:?}");
            }
        }
        // A record that does not verify, or keys out of order, fail the parse where
        // they lie, as `Loaded::parse` does.
        let good = interval(&[b"a", b"b"]);
        let mut bad = good.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        let first_len = interval(&[b"a"]).len();
        let unordered = interval(&[b"b", b"a"]);
        for (bytes, offset) in [(&bad, first_len), (&unordered, first_len)] {
            bufs.clear(usize::MAX);
            bufs.room(bytes.len()).copy_from_slice(bytes);
            let (at, _) = bufs.parse(bytes.len()).err().unwrap();
            assert_eq!(at, offset);
            assert_eq!(Loaded::parse(bytes.clone()).err().unwrap().0, offset);
        }
        // Cleared, the buffers keep their room only up to what they are told.
        bufs.room(1000);
        bufs.clear(10);
        assert_eq!(bufs.bytes.capacity(), 0);
    }

    /// Sorted, distinct keys over a small alphabet that includes zero, so that keys
    /// share long prefixes, tie on their heads, end inside another key's head and
    /// are prefixes of one another; a shared lead of 0–300 bytes in front.
    fn keys_and_targets() -> impl Strategy<Value = (Vec<Vec<u8>>, Vec<Vec<u8>>)> {
        let word = || proptest::collection::vec(prop_oneof![Just(0u8), Just(1), Just(255)], 0..8);
        (
            0..300usize,
            proptest::collection::btree_set(word(), 1..20),
            proptest::collection::vec(word(), 1..20),
        )
            .prop_map(|(lead, keys, targets)| {
                let with_lead = |w: Vec<u8>| [vec![7u8; lead], w].concat();
                let mut targets: Vec<Vec<u8>> = targets.into_iter().map(with_lead).collect();
                // Targets that leave the lead early or differ inside it too.
                targets.push(vec![7u8; lead / 2]);
                targets.push([vec![7u8; lead / 2], vec![8u8]].concat());
                targets.push(Vec::new());
                (keys.into_iter().map(with_lead).collect(), targets)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// A seek by the heads finds what a search of the whole keys finds, in an
        /// interval given its heads after it was parsed from its bytes (without), in
        /// one built from its parts, and in its slices and their concatenation (which
        /// share other prefixes than the whole); one parsed and given none seeks by
        /// its keys.
        #[test]
        fn a_seek_by_heads_finds_what_comparing_whole_keys_finds(
            (keys, targets) in keys_and_targets(),
            cut in 0..20usize,
        ) {
            let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let bare = Loaded::parse(interval(&refs)).unwrap();
            prop_assert!(bare.heads.is_empty());
            let iv = bare.clone().with_heads();
            prop_assert_eq!(iv.heads.len(), keys.len());
            let starts = iv.spans.iter().map(|s| s.start).collect();
            let built = Loaded::from_parts(iv.bytes().to_vec(), starts);
            prop_assert_eq!(&built.heads, &iv.heads);
            let cut = cut.min(keys.len());
            let (a, b) = (iv.slice(0..cut), iv.slice(cut..keys.len()));
            let joined = a.concat(&b);
            for t in targets.iter().chain(keys.iter()) {
                let want = keys.partition_point(|k| k < t);
                prop_assert_eq!(bare.seek(t), want);
                prop_assert_eq!(iv.seek(t), want);
                prop_assert_eq!(joined.seek(t), want);
                prop_assert_eq!(a.seek(t), keys[..cut].partition_point(|k| k < t));
                prop_assert_eq!(b.seek(t), keys[cut..].partition_point(|k| k < t));
            }
        }
    }

    #[test]
    fn the_struct_and_its_arc_counts_fit_a_384_byte_block() {
        // The heads made the struct 72 bytes larger; with `smallvec`'s union layout
        // (a word less per vector) and the bytes in a boxed slice (no capacity word)
        // it, 8 bytes of the shared prefix and the `Arc`'s counts still took one
        // 320-byte block of mimalloc's, as the struct without the heads did. The
        // records' sequence bound (`max_seq`) took it 8 bytes past that, into the next
        // size, 384 (docs/benchmarks.md, sixty-fifth session, says what that costs).
        let block = std::mem::size_of::<Loaded>() + 2 * std::mem::size_of::<usize>();
        assert!(block <= 384, "{block}");
        // The cache counts the whole block: the struct and counts rounded up to the
        // allocator's 64-byte step at this size.
        assert!(
            PER_INTERVAL.is_multiple_of(64) && PER_INTERVAL >= block && PER_INTERVAL - block < 64,
            "{PER_INTERVAL}"
        );
    }

    #[test]
    fn what_a_cached_hit_touches_first_shares_the_arc_counts_line() {
        use std::mem::{offset_of, size_of};
        // An `Arc`'s block: its two counts, then the struct.
        let at = |offset: usize| 2 * size_of::<usize>() + offset;
        assert!(at(offset_of!(Loaded, next)) + size_of::<Next>() <= 64);
        assert!(at(offset_of!(Loaded, referenced)) + size_of::<Referenced>() <= 64);
        assert!(at(offset_of!(Loaded, live)) + size_of::<Live>() <= 64);
    }

    #[test]
    fn an_interval_holds_and_is_charged_exactly_its_bytes() {
        let bytes = interval(&[b"a", b"b", b"c"]);
        let starts: Vec<u32> = Loaded::parse(bytes.clone())
            .unwrap()
            .spans
            .iter()
            .map(|s| s.start)
            .collect();
        // Built with room to spare, as the committer builds an interval.
        let mut roomy = Vec::with_capacity(4 * bytes.len());
        roomy.extend_from_slice(&bytes);
        let iv = Loaded::from_parts(roomy, starts);
        assert_eq!(iv.bytes.len(), bytes.len());
        assert_eq!(iv.footprint(), overhead(3) + bytes.len());
        let joined = iv.slice(0..1).concat(&iv.slice(1..3));
        assert_eq!(joined.bytes.len(), bytes.len());
        assert_eq!(joined.footprint(), iv.footprint());
    }

    #[test]
    fn damaged_or_unordered_bytes_are_refused() {
        let mut bytes = interval(&[b"a", b"b"]);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        assert!(Loaded::parse(bytes).is_err());
        assert!(Loaded::parse(interval(&[b"b", b"a"])).is_err());
        assert!(Loaded::parse(interval(&[b"a", b"a"])).is_err());
        let cut = interval(&[b"a", b"b"]);
        assert!(Loaded::parse(cut[..cut.len() - 2].to_vec()).is_err());
        assert_eq!(Loaded::parse(Vec::new()).unwrap().len(), 0);
    }
}

//! Point reads beside the committer's write sections: a copy of the sparse index (each
//! slot with its interval's shortcut and cached interval, if any) and a [`SpaceView`]
//! of the space, made by the committer between two write sections when reads had to
//! wait for one or met one, and read without the keyspace's lock.
//!
//! A read that finds the lock held by a write section and its interval not cached
//! waited for the section to end, and since the committer takes the next one at once,
//! usually for its whole slice: a third of a 10M point-read phase that began during a
//! commit went that way (docs/benchmarks.md, fortieth session). With a view, it reads
//! the keyspace as it was when the view was made. A read whose interval is cached
//! found it by the cache's skip list, whose floor search misses the processor cache at
//! nearly every level; the view's index finds it in a few nodes, and its slot holds the
//! interval as it was cached when the view was made (docs/benchmarks.md, forty-fifth
//! session).
//!
//! Why that answer is the right one. A read looks in the memtables first, then in the
//! store. A view is made during the commit of some frozen memtable `M`, and shows every
//! commit before `M`'s and maybe part of `M`'s. The commit retires the view before `M`
//! leaves the memtable list ([`Views::retire`] at the end of
//! [`SortedStore::commit`](super::store::SortedStore)). So a reader that takes a view
//! saw `M` in the list (it looked there first, and `M` had not left it when the view
//! was still published), and every key `M`'s commit changes, it found in `M`. Every
//! other key is in the view as it is in the store. What else changes the store keeps
//! every key's version (GC of the space, rewrites for the reads, removing tombstones
//! no snapshot needs), except the value log's GC, which points records at moved values
//! and then deletes the old copies: it retires the view when it has moved them, and a
//! reader that read an old pointer from a view it took before finds the value gone and
//! reads the key again ([`crate::db`]'s `resolve`), by then from the store or a newer
//! view.
//!
//! A read from a view puts the version it found in the record cache, as a read under
//! the lock does; but by the time it goes in, a later commit (or relocation) may have
//! forgotten the key, and the version would stay cached older than the store's. So
//! every commit and relocation first counts itself begun ([`Views::begin_change`]);
//! the view keeps the count it was made at, and a read that put a record takes it back
//! out unless the count is still that after the put. If it is, any change that forgets
//! the key began after the put and forgets it after it (the count and the cache's
//! operations are sequentially consistent). An interval the view's slot holds is the
//! cached form of the interval's bytes when the view was made, so it reads as the
//! view's space does, or (where the keyspace fits the cache) the form the committer
//! cached since in its place ([`Views::replace`]), which differs from that only in keys
//! of the memtable being committed. Reads from a view do not fill the interval cache, whose slots
//! are the index's; where the keyspace fits the cache, a read that finds its interval
//! neither in the view's slot nor in the cache reads the view's space all the same
//! (waiting for the lock cost more: see `SortedStore::get`), and the next read of it
//! under the lock caches it.
//!
//! What it costs. Making a view copies the sparse index and the FlexTree (at 10M UDB
//! pairs the two take about half of a 256 MiB budget; a copy took 30–162 ms), under
//! the upgradable lock, which readers pass; the copy's memory is not in the budget, and
//! neither are the cached intervals its slots keep in memory after the cache evicts
//! them (at most the cache's size; where the keyspace fits the cache, the ones the
//! committer replaces or drops, it takes out of the view's slots too, and elsewhere
//! those stay as well). One is made only after a read met a write section
//! with none published, so at most one per commit unless a relocation retires it.
//! While it lives, the space holds the segments it frees ([`SpaceView`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::index::SparseIndex;
use super::interval::Loaded;
use super::store::State;
use crate::space::SpaceView;

/// A copy of a keyspace's sparse index and space at one moment between two write
/// sections.
#[derive(Debug)]
pub(crate) struct View {
    pub(crate) index: SparseIndex,
    pub(crate) space: SpaceView,
    /// [`Views::begun`] when the view was made.
    begun: u64,
}

/// The view published for readers, if any, and whether a read wants one.
#[derive(Debug, Default)]
pub(crate) struct Views {
    current: Mutex<Option<Arc<View>>>,
    /// Set by a read that found neither the lock free nor a view; cleared when a view
    /// is made. (Not when one is retired: reads that met one commit's write sections
    /// will meet the next's, which may be one slice long and so have no other slice to
    /// make one.)
    wanted: AtomicBool,
    /// Commits and relocations begun: what a read from a view may cache.
    begun: AtomicU64,
}

impl Views {
    /// The published view; if there is none, asks the committer for one.
    pub(crate) fn get(&self) -> Option<Arc<View>> {
        let v = self.current.lock().clone();
        if v.is_none() && !self.wanted.load(Ordering::Relaxed) {
            self.wanted.store(true, Ordering::Relaxed);
        }
        v
    }

    /// Makes and publishes a view of `st` if a read asked for one and none is
    /// published; returns whether it did. The caller holds the keyspace's lock (at least
    /// upgradable), so `st` is between write sections.
    pub(crate) fn offer(&self, st: &State) -> bool {
        if !self.wanted.load(Ordering::Relaxed) || self.current.lock().is_some() {
            return false;
        }
        let Some(space) = st.space.view() else {
            self.wanted.store(false, Ordering::Relaxed);
            return false;
        };
        let view = Arc::new(View {
            index: st.index.find_copy(),
            space,
            begun: self.begun.load(Ordering::SeqCst),
        });
        *self.current.lock() = Some(view);
        self.wanted.store(false, Ordering::Relaxed);
        true
    }

    /// Keeps the published view's slot for the interval keyed `key` in step with the
    /// cache as the committer changes that interval (`now`: its new cached form and the
    /// key after it now, or `None` if it is not cached any more or no longer one
    /// interval). The new form takes the old one's place where the interval spans the
    /// same keys as in the view, so it holds every record a read of the view looks
    /// for there (and differs only in keys of the memtable being committed, which a
    /// reader found there first); elsewhere the slot is emptied. Either way the view
    /// does not keep the old form in memory.
    pub(crate) fn replace(&self, key: &[u8], now: Option<(&Arc<Loaded>, Option<&[u8]>)>) {
        let Some(view) = self.current.lock().clone() else {
            return;
        };
        let at = view.index.locate(key);
        if view.index.key_of(at) != key {
            return;
        }
        let new = now
            .filter(|(_, end)| view.index.next_key_of(at).as_deref() == *end)
            .map(|(l, _)| Arc::clone(l));
        let old = view.index.slot_at(at).swap(new);
        drop(old);
    }

    /// Counts a commit or relocation begun; called before it changes any record.
    pub(crate) fn begin_change(&self) {
        self.begun.fetch_add(1, Ordering::SeqCst);
    }

    /// Whether no commit or relocation has begun since `view` was made.
    pub(crate) fn unchanged_since(&self, view: &View) -> bool {
        self.begun.load(Ordering::SeqCst) == view.begun
    }

    /// Withdraws the published view: reads that hold it finish with it, later ones
    /// wait for the lock (and may ask for a new view).
    pub(crate) fn retire(&self) {
        // The last reference frees the copy: outside the lock.
        let old = self.current.lock().take();
        drop(old);
    }
}

//! Point reads beside the committer's write sections: a copy of the sparse index and a
//! [`SpaceView`] of the space, made by the committer between two write sections when
//! reads had to wait for one, and read without the keyspace's lock.
//!
//! A read that finds the lock held by a write section and its interval not cached
//! waited for the section to end, and since the committer takes the next one at once,
//! usually for its whole slice: a third of a 10M point-read phase that began during a
//! commit went that way (docs/benchmarks.md, fortieth session). With a view, it reads
//! the keyspace as it was when the view was made.
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
//! What it costs. Making a view copies the sparse index and the FlexTree (at 10M
//! pairs about 100 MB, tens of milliseconds), under the upgradable lock, which readers
//! pass. It is made at most once per commit, and only after a read waited. While it
//! lives, the space holds segments it frees ([`SpaceView`]). Reads from a view do not
//! fill the caches: the record cache must not take a version older than the store's,
//! and the interval cache's slots are the index's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::index::SparseIndex;
use super::store::State;
use crate::space::SpaceView;

/// A copy of a keyspace's sparse index and space at one moment between two write
/// sections.
#[derive(Debug)]
pub(crate) struct View {
    pub(crate) index: SparseIndex,
    pub(crate) space: SpaceView,
}

/// The view published for readers, if any, and whether a read wants one.
#[derive(Debug, Default)]
pub(crate) struct Views {
    current: Mutex<Option<Arc<View>>>,
    /// Set by a read that found neither the lock nor a view; cleared when a view is
    /// made or retired.
    wanted: AtomicBool,
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
        });
        *self.current.lock() = Some(view);
        self.wanted.store(false, Ordering::Relaxed);
        true
    }

    /// Withdraws the published view: reads that hold it finish with it, later ones
    /// wait for the lock (and may ask for a new view).
    pub(crate) fn retire(&self) {
        let old = self.current.lock().take();
        self.wanted.store(false, Ordering::Relaxed);
        drop(old);
    }
}

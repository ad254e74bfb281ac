//! The memtable's memory: chunks carved by bumping a pointer, freed all at once when
//! the memtable goes, and handed on through a [`ChunkPool`] to the memtables after it.
//!
//! Why not the allocator: a memtable's entries are allocated one by one and die
//! together, and each memtable's memory used to come back from the kernel as fresh
//! pages to be zeroed. A profile of `fillseq` (1M pairs) put 26% of the writer's
//! samples in the kernel zeroing pages under the skip list's node allocations
//! (docs/benchmarks.md, twenty-eighth session). Chunks a committed memtable leaves in
//! the pool are already faulted in; the next memtable writes into them as they are.
//!
//! Invariants: every region handed out lies inside one chunk this arena owns, is
//! 8-byte aligned, and is never handed out twice; chunks are freed (or pooled) only
//! when the arena is dropped, so a region stays valid for the arena's whole life.

#![allow(unsafe_code)]

use std::ptr::NonNull;

use parking_lot::Mutex;

/// Bytes of a pooled chunk. A memtable of 64 MiB takes 64 of them.
pub(crate) const CHUNK: usize = 1 << 20;

/// Regions are aligned to this many bytes (the nodes hold `u64`s and pointers).
pub(crate) const ALIGN: usize = 8;

/// One allocation, owned: `words` 8-byte words at `base`.
struct Chunk {
    base: NonNull<u64>,
    words: usize,
}

// SAFETY: a chunk is plain memory with one owner; the arena that owns it hands out
// disjoint regions of it, and the nodes written there are shared under the skip
// list's own rules (see `list.rs`).
unsafe impl Send for Chunk {}

impl Chunk {
    fn new(bytes: usize) -> Chunk {
        let words = bytes.div_ceil(ALIGN);
        let b: Box<[u64]> = vec![0u64; words].into_boxed_slice();
        let raw = Box::into_raw(b);
        // A `Box` is never null; the cast keeps the whole slice's provenance.
        let base =
            NonNull::new(raw.cast::<u64>()).unwrap_or_else(|| unreachable!("a box is never null"));
        Chunk { base, words }
    }

    fn bytes(&self) -> usize {
        self.words * ALIGN
    }
}

impl Drop for Chunk {
    fn drop(&mut self) {
        let slice = std::ptr::slice_from_raw_parts_mut(self.base.as_ptr(), self.words);
        // SAFETY: `base` and `words` came from `Box::into_raw` of a `Box<[u64]>` of
        // exactly this length in `Chunk::new`, and only this drop frees it.
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// Chunks that committed memtables gave back, for the memtables after them.
#[derive(Default)]
pub(crate) struct ChunkPool {
    free: Mutex<Vec<Chunk>>,
}

impl std::fmt::Debug for ChunkPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChunkPool({} bytes)", self.bytes())
    }
}

impl ChunkPool {
    /// Bytes the pool holds.
    pub(crate) fn bytes(&self) -> usize {
        self.free.lock().len() * CHUNK
    }

    /// Frees every pooled chunk (the committer calls this when writes have stopped,
    /// so an idle database does not keep a memtable's worth of memory).
    pub(crate) fn clear(&self) {
        let chunks = std::mem::take(&mut *self.free.lock());
        drop(chunks);
    }

    fn take(&self) -> Option<Chunk> {
        self.free.lock().pop()
    }

    fn give(&self, chunks: impl IntoIterator<Item = Chunk>, limit: usize) {
        let mut free = self.free.lock();
        for c in chunks {
            if c.bytes() == CHUNK && free.len() * CHUNK < limit {
                free.push(c);
            }
        }
    }
}

struct State {
    chunks: Vec<Chunk>,
    /// The next free byte of the last chunk, and how many follow it.
    next: *mut u8,
    left: usize,
    used: usize,
}

/// A bump allocator over chunks, shared by the threads that insert into one memtable.
pub(crate) struct Arena {
    state: Mutex<State>,
    pool: Option<std::sync::Arc<ChunkPool>>,
    /// Pooled bytes this arena's chunks may fill the pool up to when it goes.
    pool_limit: usize,
}

// SAFETY: `State::next` points into a chunk the arena owns and is only read or moved
// under the mutex; the arena hands each region out once.
unsafe impl Send for Arena {}
// SAFETY: as above: every access to the state is under the mutex.
unsafe impl Sync for Arena {}

impl Arena {
    /// An arena that takes chunks from `pool` (if any) before allocating, and gives
    /// its chunks back to it when dropped, while the pool holds under `pool_limit`
    /// bytes.
    pub(crate) fn new(pool: Option<std::sync::Arc<ChunkPool>>, pool_limit: usize) -> Arena {
        Arena {
            state: Mutex::new(State {
                chunks: Vec::new(),
                next: std::ptr::null_mut(),
                left: 0,
                used: 0,
            }),
            pool,
            pool_limit,
        }
    }

    /// Bytes handed out so far.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.state.lock().used
    }

    /// Hands out one region for each size in `sizes` (each rounded up to [`ALIGN`]),
    /// under one lock: a writer allocates its whole batch at once.
    pub(crate) fn alloc_each(&self, sizes: &[usize], out: &mut Vec<NonNull<u8>>) {
        let mut st = self.state.lock();
        for &size in sizes {
            let size = size.next_multiple_of(ALIGN);
            if size > st.left {
                self.grow(&mut st, size);
            }
            // SAFETY: `next` points at `left >= size` free bytes of the last chunk
            // (just ensured), so moving it by `size` stays inside that chunk (or one
            // past its end).
            let region = st.next;
            st.next = unsafe { st.next.add(size) };
            st.left -= size;
            st.used += size;
            out.push(NonNull::new(region).unwrap_or_else(|| unreachable!("chunks are never null")));
        }
    }

    /// Makes the last chunk one with at least `size` free bytes: a pooled or new
    /// [`CHUNK`], or a chunk of its own for a region larger than that. What was left of
    /// the previous chunk is not used again.
    fn grow(&self, st: &mut State, size: usize) {
        let chunk = if size > CHUNK {
            Chunk::new(size)
        } else {
            self.pool
                .as_ref()
                .and_then(|p| p.take())
                .unwrap_or_else(|| Chunk::new(CHUNK))
        };
        st.next = chunk.base.as_ptr().cast::<u8>();
        st.left = chunk.bytes();
        st.chunks.push(chunk);
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        let chunks = std::mem::take(&mut self.state.get_mut().chunks);
        match &self.pool {
            Some(pool) => pool.give(chunks, self.pool_limit),
            None => drop(chunks),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn regions_are_aligned_disjoint_and_inside_chunks() {
        let arena = Arena::new(None, 0);
        let sizes: Vec<usize> = (0..5000).map(|i| 1 + (i * 37) % 700).collect();
        let mut regions = Vec::new();
        arena.alloc_each(&sizes, &mut regions);
        arena.alloc_each(&[3 * CHUNK], &mut regions);
        let mut spans: Vec<(usize, usize)> = regions
            .iter()
            .zip(sizes.iter().chain([&(3 * CHUNK)]))
            .map(|(p, &s)| (p.as_ptr() as usize, s))
            .collect();
        assert!(spans.iter().all(|(a, _)| a % ALIGN == 0));
        spans.sort_unstable();
        for w in spans.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0, "regions overlap: {w:?}");
        }
        let total: usize = sizes.iter().map(|s| s.next_multiple_of(ALIGN)).sum();
        assert_eq!(arena.used(), total + 3 * CHUNK);
        // Every byte of every region can be written (Miri or ASan would catch a
        // region past its chunk).
        for (p, &s) in regions.iter().zip(&sizes) {
            // SAFETY: the region has `s` bytes of its own (asserted disjoint above).
            unsafe { std::ptr::write_bytes(p.as_ptr(), 0xAB, s) };
        }
    }

    #[test]
    fn a_dropped_arena_pools_its_chunks_up_to_the_limit_and_the_next_takes_them() {
        let pool = Arc::new(ChunkPool::default());
        let a = Arena::new(Some(Arc::clone(&pool)), 2 * CHUNK);
        let mut r = Vec::new();
        a.alloc_each(&[CHUNK, CHUNK, CHUNK, 2 * CHUNK], &mut r);
        drop(a);
        assert_eq!(pool.bytes(), 2 * CHUNK, "three standard chunks, two pooled");
        let b = Arena::new(Some(Arc::clone(&pool)), 2 * CHUNK);
        r.clear();
        b.alloc_each(&[100], &mut r);
        assert_eq!(pool.bytes(), CHUNK, "one taken from the pool");
        pool.clear();
        assert_eq!(pool.bytes(), 0);
    }
}

//! Asking the processor for memory before it is read: a hint per 64-byte cache line,
//! which does not wait for the line. Used where the engine knows which bytes it will
//! read next and the processor's own prefetchers cannot (they stop at each 4 KiB page):
//! the records of a run a scan takes from a cached interval, values read from the
//! value log's mapping (see `vlog/cold.rs`), and the runs of a range a FlexSpace reads
//! through its window, with their checksum-table entries.
//!
//! The lines go to the second-level cache, which keeps more misses in flight than the
//! first. On this project's machine (AMD EPYC), checking random 16 KiB values with
//! hints 4 KiB ahead ran 1.2–1.3× faster into the second-level cache than into the
//! first, and `seekrandom` 1.09× (docs/benchmarks.md, the thirtieth session).

#![allow(unsafe_code)]

/// Asks for every cache line of `items` into the second-level cache (nothing elsewhere
/// than x86-64).
pub(crate) fn prefetch<T>(items: &[T]) {
    prefetch_bytes(items.as_ptr().cast(), std::mem::size_of_val(items));
}

/// Asks for every cache line of the `len` bytes at `start`, which need not be memory
/// the caller may read (a hint never faults): a scan asks for the struct of the
/// interval it will likely step to next before it knows whether it still may.
pub(crate) fn prefetch_bytes(start: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T1};
        let start = start.cast::<i8>();
        for at in (0..len).step_by(64) {
            // SAFETY: a prefetch is a hint: it reads nothing the program can observe,
            // changes no memory, and never faults, whatever the address; SSE, which it
            // needs, is part of every x86-64 processor.
            unsafe { _mm_prefetch::<_MM_HINT_T1>(start.wrapping_add(at)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (start, len);
}

//! Asking the processor for memory before it is read: a hint per 64-byte cache line,
//! which does not wait for the line. Used where the engine knows which bytes it will
//! read next and the processor's own prefetchers cannot (they stop at each 4 KiB page):
//! the records of a run a scan takes from a cached interval, and values read from the
//! value log's mapping (see `vlog/cold.rs`).

#![allow(unsafe_code)]

/// Which cache the lines are asked into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    /// The first-level cache: for bytes read within the next few hundred nanoseconds.
    L1,
    /// The second-level cache, larger and with more misses in flight: for kilobytes
    /// read a little later.
    L2,
}

/// Asks for every cache line of `bytes`. Elsewhere than x86-64, `L1` loads the first
/// byte of each line (the processor overlaps those misses, but the caller waits for
/// them) and `L2` does nothing.
pub(crate) fn prefetch(bytes: &[u8], level: Level) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0, _MM_HINT_T1};
        let p = line.as_ptr().cast();
        // SAFETY: a prefetch is a hint: it reads nothing the program can observe,
        // changes no memory, and never faults, whatever the address (this one is in a
        // live slice anyway); SSE, which it needs, is part of every x86-64 processor.
        unsafe {
            match level {
                Level::L1 => _mm_prefetch::<_MM_HINT_T0>(p),
                Level::L2 => _mm_prefetch::<_MM_HINT_T1>(p),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    if level == Level::L1 {
        let x = bytes.iter().step_by(64).fold(0u8, |x, b| x ^ b);
        std::hint::black_box(x);
    }
}

//! TinyLFU's doorkeeper: what was missed lately, so that a full cache takes a key on
//! its second miss within a window of misses, not its first. The interval cache
//! remembers interval keys this way, the record cache record keys.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The keys reads missed lately. A bit set with two bits per key, eight bits per key of
/// the window, cleared once a window's worth of new keys went in. It may say "seen" of
/// a key it was never told about (about one in twenty at a full window), which only
/// admits that key early.
pub(crate) struct Doorkeeper {
    bits: Box<[AtomicU64]>,
    added: AtomicUsize,
    window: usize,
}

impl Doorkeeper {
    /// A doorkeeper that remembers about `window` keys.
    pub(crate) fn new(window: usize) -> Self {
        let words = (window * 8).div_ceil(64).max(1).next_power_of_two();
        Doorkeeper {
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            added: AtomicUsize::new(0),
            window: window.max(1),
        }
    }

    /// Records a miss of `key`; returns whether one was recorded since the last
    /// clearing.
    pub(crate) fn missed_before(&self, key: &[u8]) -> bool {
        use std::hash::BuildHasher;
        let h = foldhash::fast::FixedState::default().hash_one(key);
        let mask = self.bits.len() * 64 - 1;
        let mut seen = true;
        for bit in [h as usize & mask, (h >> 32) as usize & mask] {
            let b = 1u64 << (bit % 64);
            seen &= self.bits[bit / 64].fetch_or(b, Ordering::Relaxed) & b != 0;
        }
        if !seen && self.added.fetch_add(1, Ordering::Relaxed) + 1 >= self.window {
            // Racing readers may lose a few marks here: they only delay an admission.
            self.bits.iter().for_each(|w| w.store(0, Ordering::Relaxed));
            self.added.store(0, Ordering::Relaxed);
        }
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_seen_on_its_second_miss_until_a_window_of_new_keys_clears_it() {
        let d = Doorkeeper::new(1000);
        assert!(!d.missed_before(b"a"));
        assert!(d.missed_before(b"a"));
        // Fewer than a window of other keys: still remembered.
        for i in 0..500u32 {
            d.missed_before(&i.to_be_bytes());
        }
        assert!(d.missed_before(b"a"));
        // A window of new keys clears everything.
        for i in 1000..2000u32 {
            d.missed_before(&i.to_be_bytes());
        }
        assert!(!d.missed_before(b"a"), "forgotten after a window");
        let false_positives = (5000..6000u32)
            .filter(|i| d.missed_before(&i.to_be_bytes()))
            .count();
        assert!(
            false_positives < 150,
            "{false_positives} of 1000 new keys seen"
        );
    }
}

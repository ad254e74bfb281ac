//! A short wait by spinning, before a writer sleeps on a condition variable.
//!
//! Writers that share a group commit wait twice per batch: a follower for the leader
//! to write its group, and every writer for the batches before its own to be applied
//! (visibility goes in sequence order). With small buffered batches both waits last a
//! few microseconds, while going to sleep on a condition variable and being woken
//! costs two system calls and two context switches, more than the wait itself: with
//! two threads writing single-pair batches, a third of their time went to `futex`
//! (docs/benchmarks.md, sixty-eighth session). So a waiter first watches the state it
//! waits on for up to [`SPIN`], asking the processor to pause between looks, and from
//! [`YIELD_AFTER`] looks on giving its core to any other thread that is ready to run
//! (a leader or the committer, where there are more threads than cores); only then
//! does it sleep.

use std::time::{Duration, Instant};

/// How long a waiter watches before it sleeps.
pub(crate) const SPIN: Duration = Duration::from_micros(5);

/// Looks after which a waiter yields its core between looks instead of pausing.
const YIELD_AFTER: u32 = 64;

/// Watches `done` until it says so (`true`) or [`SPIN`] has passed (`false`).
pub(crate) fn until(mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    let mut looks = 0u32;
    loop {
        if done() {
            return true;
        }
        looks += 1;
        if looks < YIELD_AFTER {
            std::hint::spin_loop();
            continue;
        }
        if start.elapsed() >= SPIN {
            return false;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_holds_ends_the_wait_at_once_and_one_that_never_does_after_the_spin() {
        assert!(until(|| true));
        let start = Instant::now();
        assert!(!until(|| false));
        assert!(start.elapsed() >= SPIN);
    }

    #[test]
    fn a_condition_that_comes_true_after_many_looks_is_seen_and_no_look_follows() {
        // The pauses come before any look at the clock: a condition that holds at the
        // last of them is seen whatever the machine's speed, and looked at no more.
        let mut looks = 0;
        assert!(until(|| {
            looks += 1;
            looks == YIELD_AFTER
        }));
        assert_eq!(looks, YIELD_AFTER);
    }
}

//! The byte order of keys, worked out inline for short keys.
//!
//! Comparing two byte slices (`<`, `cmp`, `==`) calls the C library's `memcmp` or
//! `bcmp`: a call and the function's dispatch on length for every comparison, which
//! for a 16-byte key costs more than the comparison. The committer compares keys
//! dozens of times per pair it applies (which interval, where in it, whether the keys
//! still increase), and `memcmp` was 6% of its time at 10M random pairs
//! (docs/benchmarks.md, the sixty-seventh session). Here keys of up to [`INLINE`]
//! bytes are compared eight bytes at a time as big-endian numbers (whose order is the
//! bytes' order), and longer ones as slices.

use std::cmp::Ordering;

/// Keys up to this long (both) are compared here; longer ones by `memcmp`.
const INLINE: usize = 32;

/// The order of `a` and `b` as byte strings: `a.cmp(b)`.
#[inline]
pub(crate) fn cmp(a: &[u8], b: &[u8]) -> Ordering {
    let n = a.len().min(b.len());
    if n > INLINE {
        return a.cmp(b);
    }
    let (mut x, mut y) = (a, b);
    while let (Some((wa, ra)), Some((wb, rb))) =
        (x.split_first_chunk::<8>(), y.split_first_chunk::<8>())
    {
        if wa != wb {
            return u64::from_be_bytes(*wa).cmp(&u64::from_be_bytes(*wb));
        }
        (x, y) = (ra, rb);
    }
    for (p, q) in x.iter().zip(y) {
        if p != q {
            return p.cmp(q);
        }
    }
    a.len().cmp(&b.len())
}

/// `a < b` as byte strings.
#[inline]
pub(crate) fn lt(a: &[u8], b: &[u8]) -> bool {
    cmp(a, b) == Ordering::Less
}

/// `a == b`.
#[inline]
pub(crate) fn eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && cmp(a, b) == Ordering::Equal
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Keys over a small alphabet, so that they often share prefixes of every length,
    /// or are prefixes of each other, on both sides of the inline limit.
    fn key() -> impl Strategy<Value = Vec<u8>> {
        prop::collection::vec(prop::sample::select(vec![0u8, 1, 127, 128, 255]), 0..48)
    }

    proptest! {
        #[test]
        fn orders_as_slices_do(a in key(), b in key(), shared in 0usize..40) {
            let mut b2 = a[..shared.min(a.len())].to_vec();
            b2.extend_from_slice(&b);
            for (x, y) in [(&a, &b), (&a, &b2), (&b2, &a), (&a, &a)] {
                prop_assert_eq!(cmp(x, y), x.cmp(y));
                prop_assert_eq!(lt(x, y), x < y);
                prop_assert_eq!(eq(x, y), x == y);
            }
        }
    }
}

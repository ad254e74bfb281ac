//! What the workloads ask for: keys, values, the YCSB request distributions (uniform,
//! scrambled Zipfian, latest) and a latency histogram.
//!
//! Keys are fixed-width decimal numbers, so they sort as numbers. Record `j` of a
//! database has key number `scatter(j)`, a bijection on `[0, 2^50)`, so loading records
//! `0, 1, 2, …` inserts keys in random order without a shuffled list in memory, a record
//! `j ≥ n` is a key that is missing (and lands anywhere in the key order), and YCSB's
//! inserts of new records spread over the keyspace as YCSB's hashed keys do.

use rand::rngs::SmallRng;
use rand::Rng;

/// Bits of the key-number domain: 2^50 < 10^16, so every key fits 16 digits.
const DOMAIN_BITS: u32 = 50;
const HALF_BITS: u32 = DOMAIN_BITS / 2;
const HALF_MASK: u64 = (1 << HALF_BITS) - 1;
const ROUND_KEYS: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7344,
    0xa409_3822_299f_31d0,
    0x082e_fa98_ec4e_6c89,
];

/// The smallest key length the harness supports (the widest key number).
pub const MIN_KEY_LEN: usize = 16;

/// A 64-bit mixing function (the finalizer of a multiply-xorshift hash).
pub fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// A bijection on `[0, 2^50)`: a four-round Feistel network over two 25-bit halves. Any
/// round function gives a permutation; a good mixer makes it look random.
pub fn scatter(j: u64) -> u64 {
    assert!(
        j < 1 << DOMAIN_BITS,
        "record number {j} outside the key domain"
    );
    let (mut l, mut r) = (j >> HALF_BITS, j & HALF_MASK);
    for k in ROUND_KEYS {
        let f = mix64(r ^ k) & HALF_MASK;
        (l, r) = (r, l ^ f);
    }
    (l << HALF_BITS) | r
}

/// Writes `number` as a zero-padded decimal of exactly `len` bytes into `buf`.
pub fn write_number(buf: &mut Vec<u8>, number: u64, len: usize) {
    assert!(
        len >= MIN_KEY_LEN,
        "keys must be at least {MIN_KEY_LEN} bytes"
    );
    buf.clear();
    buf.resize(len, b'0');
    let mut n = number;
    for slot in buf.iter_mut().rev() {
        if n == 0 {
            break;
        }
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// The key of record `j` (random order in `j`).
pub fn record_key(buf: &mut Vec<u8>, j: u64, len: usize) {
    write_number(buf, scatter(j), len);
}

/// The key of record `j` for `fillseq` (ascending in `j`).
pub fn sequential_key(buf: &mut Vec<u8>, j: u64, len: usize) {
    write_number(buf, j, len);
}

/// Incompressible value bytes: slices of one random pool, at an offset picked by the
/// record and the round of writing, so an overwrite changes the value.
pub struct Values {
    pool: Vec<u8>,
    len: usize,
}

impl Values {
    const POOL: usize = 1 << 20;

    /// Values of `len` bytes.
    pub fn new(len: usize, rng: &mut SmallRng) -> Values {
        let mut pool = vec![0u8; Self::POOL + len];
        rng.fill(&mut pool[..]);
        Values { pool, len }
    }

    /// The value of record `j` written in `round`.
    pub fn get(&self, j: u64, round: u64) -> &[u8] {
        let off = (mix64(j ^ round.rotate_left(40)) % Self::POOL as u64) as usize;
        &self.pool[off..off + self.len]
    }
}

/// YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record synthetic
/// databases", SIGMOD 1994): item 0 is the most popular; P(i) ∝ 1 / (i+1)^θ.
pub struct Zipf {
    items: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    /// YCSB's default skew.
    pub const THETA: f64 = 0.99;

    /// A generator over `items` items (≥ 2) with skew `theta` (0 < θ < 1).
    pub fn new(items: u64, theta: f64) -> Zipf {
        assert!(items >= 2 && theta > 0.0 && theta < 1.0);
        let zeta = |n: u64| (1..=n).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(items);
        let zeta2 = zeta(2);
        let eta = (1.0 - (2.0 / items as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf {
            items,
            theta,
            alpha: 1.0 / (1.0 - theta),
            zetan,
            eta,
        }
    }

    /// The next item, in `[0, items)`.
    pub fn next(&self, rng: &mut SmallRng) -> u64 {
        let u: f64 = rng.random();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1;
        }
        let item = (self.items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        item.min(self.items - 1)
    }
}

/// How a YCSB workload picks the record an operation touches.
pub enum Chooser<'a> {
    /// Every record equally likely.
    Uniform,
    /// Zipfian popularity, with the popular items scattered over the records (YCSB's
    /// "scrambled Zipfian").
    ScrambledZipfian(&'a Zipf),
    /// Zipfian over recency: the newest record is the most popular (YCSB's "latest").
    Latest(&'a Zipf),
}

impl Chooser<'_> {
    /// A record in `[0, records)`, where `records` counts the inserts so far.
    pub fn pick(&self, rng: &mut SmallRng, records: u64) -> u64 {
        match self {
            Chooser::Uniform => rng.random_range(0..records),
            Chooser::ScrambledZipfian(z) => mix64(z.next(rng)) % records,
            Chooser::Latest(z) => records - 1 - z.next(rng) % records,
        }
    }
}

/// Latencies in nanoseconds, in log-linear buckets of 16 per power of two (at most 6%
/// off), so a histogram is 8 KiB whatever the operation count.
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; 64 * 16],
            total: 0,
        }
    }
}

impl Histogram {
    fn bucket(v: u64) -> usize {
        if v < 16 {
            return v as usize;
        }
        let shift = 63 - v.leading_zeros() - 4;
        (((shift + 1) << 4) as u64 | ((v >> shift) & 15)) as usize
    }

    fn midpoint(b: usize) -> f64 {
        if b < 16 {
            return b as f64;
        }
        let shift = (b >> 4) - 1;
        let low = ((16 | (b & 15)) as u64) << shift;
        low as f64 + (1u64 << shift) as f64 / 2.0
    }

    /// Records one latency.
    pub fn record(&mut self, nanos: u64) {
        self.counts[Self::bucket(nanos)] += 1;
        self.total += 1;
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
    }

    /// Latencies recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The latency at quantile `q` (0–1) in microseconds, or 0 if empty.
    pub fn quantile_us(&self, q: f64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let rank = ((q * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0;
        for (b, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Self::midpoint(b) / 1000.0;
            }
        }
        unreachable!("rank {rank} is at most the total {}", self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use std::collections::HashSet;

    #[test]
    fn scatter_is_a_bijection_on_a_sample() {
        let seen: HashSet<u64> = (0..200_000).map(scatter).collect();
        assert_eq!(seen.len(), 200_000);
        assert!(seen.iter().all(|&x| x < 1 << DOMAIN_BITS));
        // Random order: consecutive records are not consecutive keys.
        let ascending = (0..1000).filter(|&j| scatter(j) < scatter(j + 1)).count();
        assert!(
            (350..650).contains(&ascending),
            "{ascending} of 1000 ascending"
        );
    }

    #[test]
    fn keys_are_fixed_width_and_sort_as_numbers() {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        write_number(&mut a, 42, 16);
        assert_eq!(a, b"0000000000000042");
        write_number(&mut b, (1 << 50) - 1, 27);
        assert_eq!(b.len(), 27);
        assert!(a < b);
        record_key(&mut a, 7, 16);
        assert_eq!(
            String::from_utf8(a).unwrap().parse::<u64>().unwrap(),
            scatter(7)
        );
    }

    #[test]
    fn zipfian_is_skewed_like_ycsb() {
        let mut rng = SmallRng::seed_from_u64(1);
        let z = Zipf::new(1000, Zipf::THETA);
        let mut counts = vec![0u64; 1000];
        for _ in 0..200_000 {
            counts[z.next(&mut rng) as usize] += 1;
        }
        // P(0) = 1 / zeta(1000) ≈ 0.134 for θ = 0.99; P(1) ≈ P(0) / 2^0.99.
        let p0 = counts[0] as f64 / 200_000.0;
        assert!((0.12..0.15).contains(&p0), "p0 = {p0}");
        let ratio = counts[0] as f64 / counts[1] as f64;
        assert!((1.8..2.2).contains(&ratio), "p0/p1 = {ratio}");
        assert!(counts[999] < counts[10]);
    }

    #[test]
    fn latest_favours_the_newest_records() {
        let mut rng = SmallRng::seed_from_u64(2);
        let z = Zipf::new(10_000, Zipf::THETA);
        let c = Chooser::Latest(&z);
        let newest = (0..10_000)
            .filter(|_| c.pick(&mut rng, 10_000) >= 9_990)
            .count();
        assert!(
            newest > 3_000,
            "{newest} of 10,000 picks among the newest 10"
        );
        assert!((0..1000).all(|_| c.pick(&mut rng, 10_000) < 10_000));
    }

    #[test]
    fn histogram_quantiles_are_within_a_bucket() {
        let mut h = Histogram::default();
        for v in 1..=100_000u64 {
            h.record(v * 1000);
        }
        for (q, want) in [(0.5, 50_000.0), (0.99, 99_000.0), (0.999, 99_900.0)] {
            let got = h.quantile_us(q);
            assert!((got - want).abs() / want < 0.07, "q{q}: {got} vs {want}");
        }
        let mut other = Histogram::default();
        other.record(5);
        h.merge(&other);
        assert_eq!(h.count(), 100_001);
        assert_eq!(Histogram::default().quantile_us(0.5), 0.0);
    }
}

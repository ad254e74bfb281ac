use super::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// The model: intervals in order, as (key, size); offsets are the running sums.
fn model_intervals(m: &[(Vec<u8>, u64)]) -> Vec<Interval> {
    let mut off = 0;
    m.iter()
        .map(|(k, s)| {
            let i = Interval {
                key: k.clone(),
                offset: off,
                size: *s,
            };
            off += s;
            i
        })
        .collect()
}

fn key(n: u32) -> Vec<u8> {
    n.to_be_bytes().to_vec()
}

#[test]
fn an_empty_keyspace_is_one_empty_interval() {
    let ix = SparseIndex::new();
    assert_eq!(ix.len(), 1);
    assert_eq!(
        ix.find(b"anything"),
        Interval {
            key: vec![],
            offset: 0,
            size: 0
        }
    );
    assert_eq!(ix.next(b""), None);
    assert_eq!(ix.total(), 0);
    ix.check().unwrap();
}

/// Figure 10 of the paper: four intervals; inserting a 9-byte pair into the second
/// shifts the last two by 9.
#[test]
fn figure_10_insert_shifts_the_later_intervals() {
    let mut ix = SparseIndex::new();
    ix.resize(b"", 106).unwrap();
    ix.split(b"", 42, b"bit").unwrap();
    ix.split(b"bit", 22, b"foo").unwrap();
    ix.split(b"foo", 27, b"pin").unwrap();
    let offsets: Vec<_> = ix.intervals().iter().map(|i| i.offset).collect();
    assert_eq!(offsets, [0, 42, 64, 91]);
    assert_eq!(ix.find(b"kit").key, b"foo");
    assert_eq!(ix.find(b"kit").offset, 64);
    assert_eq!(ix.find(b"cat").key, b"bit");
    ix.resize(b"bit", 9).unwrap();
    let offsets: Vec<_> = ix.intervals().iter().map(|i| i.offset).collect();
    assert_eq!(offsets, [0, 42, 73, 100]);
    assert_eq!(ix.total(), 115);
    ix.check().unwrap();
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    let mut ix = SparseIndex::new();
    ix.resize(b"", 10).unwrap();
    ix.split(b"", 5, b"m").unwrap();
    let before = ix.intervals();
    assert!(ix.resize(b"x", 1).is_err(), "not an index key");
    assert!(ix.resize(b"m", -6).is_err(), "size below zero");
    assert!(ix.split(b"", 6, b"c").is_err(), "past the interval's end");
    assert!(ix.split(b"", 1, b"").is_err(), "key not above its own");
    assert!(ix.split(b"", 1, b"z").is_err(), "key not below the next");
    assert!(ix.merge_next(b"m").is_err(), "nothing after the last");
    assert_eq!(ix.intervals(), before);
}

/// Random resizes, splits and merges against the model, on trees deep enough (fanout
/// 4) to split and collapse internal nodes, with `check` after every step.
#[test]
fn random_operations_match_a_model() {
    for seed in 0..12 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut ix = SparseIndex::with_fanout(4);
        let mut m: Vec<(Vec<u8>, u64)> = vec![(vec![], 0)];
        let mut gone = Vec::new();
        for step in 0..1500 {
            let i = rng.random_range(0..m.len());
            let k = m[i].0.clone();
            match rng.random_range(0..10) {
                0..=3 => {
                    let delta = rng.random_range(-(m[i].1 as i64)..=200);
                    ix.resize(&k, delta).unwrap();
                    m[i].1 = m[i].1.checked_add_signed(delta).unwrap();
                }
                4..=7 => {
                    // A new key strictly between this one and the next.
                    let lo = if k.is_empty() {
                        0
                    } else {
                        u32::from_be_bytes(k[..4].try_into().unwrap())
                    };
                    let hi = m.get(i + 1).map_or(u32::MAX, |(n, _)| {
                        u32::from_be_bytes(n[..4].try_into().unwrap())
                    });
                    if hi - lo < 2 {
                        continue;
                    }
                    let nk = key(rng.random_range(lo + 1..hi));
                    let at = rng.random_range(0..=m[i].1);
                    ix.split(&k, at, &nk).unwrap();
                    let rest = m[i].1 - at;
                    m[i].1 = at;
                    m.insert(i + 1, (nk, rest));
                }
                _ => {
                    if i + 1 < m.len() {
                        ix.merge_next(&k).unwrap();
                        let (g, s) = m.remove(i + 1);
                        m[i].1 += s;
                        gone.push(g);
                    }
                }
            }
            ix.check()
                .unwrap_or_else(|e| panic!("seed {seed} step {step}: {e}"));
            assert_eq!(ix.len(), m.len());
            let want = model_intervals(&m);
            if step % 50 == 0 {
                assert_eq!(ix.intervals(), want, "seed {seed} step {step}");
            }
            // Point lookups: a key inside some interval finds it.
            assert_eq!(Some(ix.last()), want.last().cloned());
            for probe in 0..m.len() {
                assert_eq!(ix.find(&want[probe].key), want[probe]);
                let mut inside = want[probe].key.clone();
                inside.push(0);
                assert_eq!(ix.find(&inside), want[probe], "a key inside the interval");
                assert_eq!(ix.find_key(&inside), want[probe].key);
                assert_eq!(
                    ix.next(&inside),
                    want.get(probe + 1).cloned(),
                    "the interval after"
                );
                assert_eq!(
                    ix.prev(&want[probe].key),
                    probe.checked_sub(1).map(|p| want[p].clone()),
                    "the interval before"
                );
            }
            // Keys anywhere, those of intervals merged away included: each finds the
            // interval with the greatest key at or below it.
            for _ in 0..8 {
                let probe = match rng.random_range(0..3) {
                    0 if !gone.is_empty() => gone[rng.random_range(0..gone.len())].clone(),
                    _ => key(rng.random()),
                };
                let at = want.partition_point(|iv| iv.key <= probe) - 1;
                assert_eq!(
                    ix.find(&probe),
                    want[at],
                    "seed {seed} step {step}: {probe:?}"
                );
                assert_eq!(ix.find_key(&probe), want[at].key, "find_key of {probe:?}");
                // Walks from it both ways, across leaves, stopping where told, asking
                // for slots ahead or not (which must not change what they visit).
                let take = rng.random_range(1..40);
                let ahead = rng.random_range(0..5);
                let mut walked = Vec::new();
                ix.walk_intervals(Some(&probe), true, ahead, |k, _, _, _| {
                    walked.push(k.to_vec());
                    walked.len() < take
                });
                let forward: Vec<_> = want[at..]
                    .iter()
                    .take(take)
                    .map(|i| i.key.clone())
                    .collect();
                assert_eq!(walked, forward, "walking forward from {probe:?}");
                walked.clear();
                ix.walk_intervals(Some(&probe), false, ahead, |k, _, _, _| {
                    walked.push(k.to_vec());
                    walked.len() < take
                });
                let backward: Vec<_> = want[..=at]
                    .iter()
                    .rev()
                    .take(take)
                    .map(|i| i.key.clone())
                    .collect();
                assert_eq!(walked, backward, "walking backward from {probe:?}");
            }
            // Whole walks from either end.
            for forward in [true, false] {
                let mut walked = Vec::new();
                ix.walk_keys(None, forward, |k| {
                    walked.push(k.to_vec());
                    true
                });
                let mut all: Vec<_> = want.iter().map(|i| i.key.clone()).collect();
                if !forward {
                    all.reverse();
                }
                assert_eq!(walked, all, "a whole walk, forward: {forward}");
            }
            assert_eq!(ix.total(), want.iter().map(|i| i.size).sum::<u64>());
        }
        // Merge everything back into one interval: the tree collapses to a leaf.
        while ix.len() > 1 {
            ix.merge_next(b"").unwrap();
        }
        ix.check().unwrap();
        assert_eq!(
            ix.intervals(),
            model_intervals(&[(vec![], m.iter().map(|(_, s)| s).sum())])
        );
    }
}

/// An index of `fanout` over `size` bytes, split in halves at `splits` random keys (as
/// a random load splits intervals), checked.
fn scattered(fanout: usize, size: i64, splits: usize, seed: u64) -> SparseIndex {
    let mut ix = SparseIndex::with_fanout(fanout);
    ix.resize(b"", size).unwrap();
    let mut rng = SmallRng::seed_from_u64(seed);
    for _ in 0..splits {
        let k = key(rng.random());
        let iv = ix.find(&k);
        if iv.key != k && iv.size > 1 {
            ix.split(&iv.key, iv.size / 2, &k).unwrap();
        }
    }
    ix.check().unwrap();
    ix
}

/// Nodes grow a few entries at a time, so an index built by scattered splits (as a
/// random load builds it) holds little more memory than its entries need: 1.09 times
/// their bytes here (keys, end, head, offset and cache slot; 1.06 before the heads moved
/// inside the nodes, which keep room for a full node's), where vectors left to double
/// held 1.59 times (without slots).
#[test]
fn nodes_keep_little_spare_room_under_scattered_splits() {
    let ix = scattered(FANOUT, 1 << 30, 40_000, 7);
    let slot = std::mem::size_of::<crate::sorted::cache::Slot>();
    let entries: usize = ix
        .intervals()
        .iter()
        .map(|i| i.key.len() + 4 + 4 + 8 + slot)
        .sum();
    let ratio = ix.memory_bytes() as f64 / entries as f64;
    println!("{} intervals, {ratio:.2} times their bytes", ix.len());
    assert!(ratio <= 1.25, "{ratio:.2} times the entries' bytes");
}

/// Every node keeps its keys' heads inside it, where a descent asks for them with the
/// node's own lines: the insert that overfills a node spills them, and the split right
/// after it brings both halves' back.
#[test]
fn every_node_keeps_its_heads_inside_it_through_scattered_splits() {
    let ix = scattered(FANOUT, 1 << 30, 40_000, 7);
    assert!(ix.nodes.len() > 100, "a tree of many nodes");
    assert_eq!(ix.nodes_with_heads_outside(), 0);
}

/// The next key from a position is the next interval's key, within a leaf and across
/// leaves (a fanout of 4 puts most intervals at or next to a leaf's end).
#[test]
fn the_next_key_of_a_position_is_the_next_intervals() {
    let ix = scattered(4, 1 << 20, 300, 11);
    let all = ix.intervals();
    assert!(all.len() > 250, "{} intervals", all.len());
    for (i, iv) in all.iter().enumerate() {
        let want = all.get(i + 1).map(|n| n.key.as_slice());
        // From the interval's own key and from a key inside it.
        let mut inside = iv.key.clone();
        inside.push(0);
        for probe in [&iv.key, &inside] {
            let got = ix.next_key_of(ix.locate(probe));
            assert_eq!(got.as_deref(), want, "after {:?}", iv.key);
        }
    }
}

/// The committer resizes an interval, and finds its slot, by the path it found the
/// interval by. Where the tree changed shape in between (a split that split nodes, a
/// merge that emptied one), the path is checked and the interval found again: the
/// outcome is always that of a descent by the key.
#[test]
fn a_found_path_resizes_and_finds_the_slot_as_a_descent_does_even_once_stale() {
    for seed in 0..8 {
        let mut rng = SmallRng::seed_from_u64(seed);
        let (mut ix, mut twin) = (SparseIndex::with_fanout(4), SparseIndex::with_fanout(4));
        let mut keys: Vec<Vec<u8>> = vec![vec![]];
        ix.resize(b"", 1 << 20).unwrap();
        twin.resize(b"", 1 << 20).unwrap();
        let (mut stale, mut fresh) = (0, 0);
        for _ in 0..600 {
            let k = keys[rng.random_range(0..keys.len())].clone();
            let (iv, found) = ix.find_to_edit(&k);
            assert_eq!(iv, twin.find(&k));
            // Between the find and the resize, the shape may change anywhere.
            let change = rng.random_range(0..3);
            let other = keys[rng.random_range(0..keys.len())].clone();
            let size = twin.find(&other).size;
            let num = |k: &[u8]| k.try_into().map_or(0, u32::from_be_bytes);
            let lo = num(&other);
            let hi = twin.next(&other).map_or(u32::MAX, |n| num(&n.key));
            if change == 0 && size > 1 && hi - lo > 1 {
                let nk = key(rng.random_range(lo + 1..hi));
                let at = rng.random_range(1..size);
                ix.split(&other, at, &nk).unwrap();
                twin.split(&other, at, &nk).unwrap();
                keys.push(nk);
                keys.sort();
            } else if change == 1 && twin.next(&other).is_some() {
                let gone = twin.next(&other).unwrap().key;
                ix.merge_next(&other).unwrap();
                twin.merge_next(&other).unwrap();
                keys.retain(|k| *k != gone);
            }
            if ix.still_found(&found, &iv.key) {
                fresh += 1;
            } else {
                stale += 1;
            }
            let delta = rng.random_range(-10..=10);
            let (a, b) = (
                ix.resize_found(&found, &iv.key, delta),
                twin.resize(&iv.key, delta),
            );
            assert_eq!(a.is_ok(), b.is_ok());
            assert_eq!(
                ix.slot_found(&found, &iv.key).map(std::ptr::from_ref),
                ix.slot_of(&iv.key).map(std::ptr::from_ref)
            );
            assert_eq!(ix.intervals(), twin.intervals());
            ix.check().unwrap();
        }
        assert!(
            stale > 20 && fresh > 200,
            "seed {seed}: {stale} stale, {fresh} fresh"
        );
    }
}

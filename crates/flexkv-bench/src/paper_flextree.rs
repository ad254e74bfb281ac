//! `paper-flextree`: the paper's Table 1 (FlexTree §6.1) on this machine.
//!
//! Four experiments on three in-memory extent indexes: FlexTree, a B+-tree of the same
//! layout without shift values, and a sorted array.
//! - insert: from empty, each operation inserts a 4 KiB extent at a random 4 KiB-aligned
//!   offset within the existing space (so the number of operations is the number of
//!   extents), shifting everything after it;
//! - append: from empty, each operation adds a 4 KiB extent at the end;
//! - lookup: random byte offsets in a space of N appended extents;
//! - range: random offsets, then 50 consecutive extents from there.
//!
//! For inserts at 10^6 extents the baselines cost O(N) per insert, and a full run would
//! take many minutes. By default every structure is then measured the same way: prefill
//! N/2 extents by appending, then time random inserts from N/2 on (at most N/2 of them,
//! stopping after a time budget). An insert's cost grows linearly with the size, so the
//! cost at the midpoint is the mean cost over a whole 0→N run. `--full` runs whole runs.

use std::hint::black_box;
use std::time::{Duration, Instant};

use flexkv::flextree::{FlexTree, FlexTreeOptions};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::baseline::{BPlusTree, ExtentIndex, SortedArray};

const BLOCK: u64 = 4096;
const RANGE_EXTENTS: usize = 50;
/// How long a windowed insert measurement may run per structure.
const WINDOW_BUDGET: Duration = Duration::from_millis(700);

/// Options of the `paper-flextree` command.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Run the paper's sizes: whole insert runs at 10^5 and 10^6 extents, and 10^8
    /// extents for append, lookup and range (10^9 needs more than this machine's memory).
    #[arg(long)]
    full: bool,
    /// Repeat each measurement this many times (round-robin over the structures) and
    /// report the median. Insert rows use at most 3: their baselines take seconds per run
    /// and their ratios sit orders of magnitude from the goals.
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Seed for the random offsets (the same for every structure).
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Run only the experiments whose name contains this (insert, append, lookup, range).
    #[arg(long)]
    only: Option<String>,
    /// Measure only this structure (for profiling one at a time); ratios then read 0.
    #[arg(long, value_parser = ["flextree", "btree", "array"])]
    structure: Option<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Flex,
    BTree,
    Array,
}

const KINDS: [Kind; 3] = [Kind::Flex, Kind::BTree, Kind::Array];

/// Runs `f` on a fresh index of `kind`.
fn with_index<R>(kind: Kind, f: impl FnOnce(&mut dyn ExtentIndex) -> R) -> R {
    let o = FlexTreeOptions::default();
    match kind {
        Kind::Flex => f(&mut FlexTree::with_options(o).expect("default options")),
        Kind::BTree => f(&mut BPlusTree::new(o.leaf_capacity, o.internal_capacity)),
        Kind::Array => f(&mut SortedArray::default()),
    }
}

/// One timed run: operations per second, and a checksum that must agree across structures.
struct Sample {
    mops: f64,
    check: u64,
}

fn mops(ops: u64, d: Duration) -> f64 {
    ops as f64 / d.as_secs_f64() / 1e6
}

fn append_n(idx: &mut dyn ExtentIndex, n: u64) {
    for i in 0..n {
        idx.insert(idx.size(), BLOCK, i * BLOCK);
    }
}

/// Random aligned inserts from the current size until `until` extents or the budget.
fn insert_random(
    idx: &mut dyn ExtentIndex,
    from: u64,
    until: u64,
    seed: u64,
    budget: Option<Duration>,
) -> Sample {
    let mut rng = SmallRng::seed_from_u64(seed);
    let start = Instant::now();
    let mut count = from;
    while count < until {
        let off = rng.random_range(0..=count) * BLOCK;
        idx.insert(off, BLOCK, count * BLOCK);
        count += 1;
        if budget.is_some_and(|b| count.is_multiple_of(64) && start.elapsed() > b) {
            break;
        }
    }
    let elapsed = start.elapsed();
    // What was inserted, sampled: the extents at 64 fixed places.
    let check = (0..64).fold(0u64, |acc, i| {
        acc.wrapping_add(idx.range(idx.size() / 64 * i, 3))
    });
    Sample {
        mops: mops(count - from, elapsed),
        check: if budget.is_some() {
            count - from
        } else {
            check
        },
    }
}

fn insert_full(kind: Kind, n: u64, seed: u64) -> Sample {
    with_index(kind, |idx| insert_random(idx, 0, n, seed, None))
}

fn insert_window(kind: Kind, n: u64, seed: u64) -> Sample {
    with_index(kind, |idx| {
        append_n(idx, n / 2);
        insert_random(idx, n / 2, n, seed, Some(WINDOW_BUDGET))
    })
}

fn append(kind: Kind, n: u64) -> Sample {
    with_index(kind, |idx| {
        let start = Instant::now();
        append_n(idx, n);
        let elapsed = start.elapsed();
        Sample {
            mops: mops(n, elapsed),
            check: idx.range(0, RANGE_EXTENTS),
        }
    })
}

fn reads(kind: Kind, n: u64, ops: u64, seed: u64, range: bool) -> Sample {
    with_index(kind, |idx| {
        append_n(idx, n);
        let mut rng = SmallRng::seed_from_u64(seed);
        let size = idx.size();
        let mut check = 0u64;
        let start = Instant::now();
        for _ in 0..ops {
            let off = rng.random_range(0..size);
            let v = if range {
                idx.range(off, RANGE_EXTENTS)
            } else {
                idx.lookup(off)
            };
            check = check.wrapping_add(black_box(v));
        }
        Sample {
            mops: mops(ops, start.elapsed()),
            check,
        }
    })
}

struct Row {
    experiment: String,
    extents: u64,
    method: &'static str,
    mops: [f64; 3],
    paper_ratio: f64,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Runs `run` `repeat` times per structure, round-robin with the lead rotating (A B C,
/// B C A, C A B, …) so that drift in the machine's speed and the heap left by the previous
/// run fall on every structure alike; checks all structures agree on the result and
/// returns the median per structure.
fn measure(name: &str, args: &Args, repeat: usize, run: impl Fn(Kind) -> Sample) -> [f64; 3] {
    let kinds: Vec<(usize, Kind)> = KINDS
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, k)| args.structure.as_deref().is_none_or(|s| s == key(*k)))
        .collect();
    let mut samples: Vec<Vec<Sample>> = (0..KINDS.len()).map(|_| Vec::new()).collect();
    for round in 0..repeat.max(1) {
        for j in 0..kinds.len() {
            let (i, kind) = kinds[(round + j) % kinds.len()];
            samples[i].push(run(kind));
        }
    }
    let mut out = [0.0; 3];
    for &(i, kind) in &kinds {
        out[i] = median(samples[i].iter().map(|s| s.mops).collect());
        eprintln!("  {name:<22} {:<13} {:>10.4} Mops/s", label(kind), out[i]);
    }
    let checks: Vec<u64> = kinds.iter().map(|&(i, _)| samples[i][0].check).collect();
    if !name.contains("window") {
        assert!(
            checks.iter().all(|&c| c == checks[0]),
            "{name}: the structures disagree on the result ({checks:?}); a baseline is wrong"
        );
    }
    out
}

fn key(kind: Kind) -> &'static str {
    match kind {
        Kind::Flex => "flextree",
        Kind::BTree => "btree",
        Kind::Array => "array",
    }
}

fn label(kind: Kind) -> &'static str {
    match kind {
        Kind::Flex => "FlexTree",
        Kind::BTree => "B+-tree",
        Kind::Array => "sorted array",
    }
}

/// Runs the benchmark and prints the report.
pub fn run(args: &Args) {
    let r = args.repeat.max(1);
    let seed = args.seed;
    let big = if args.full { 100_000_000 } else { 1_000_000 };
    let read_ops = if args.full { 10_000_000 } else { 500_000 };
    let insert_repeat = r.min(3);
    let mut rows = Vec::new();
    let wanted = |name: &str| args.only.as_deref().is_none_or(|o| name.contains(o));
    eprintln!(
        "paper-flextree: measuring (median of {r} runs per cell, {insert_repeat} for inserts)…"
    );

    if wanted("insert") {
        rows.push(Row {
            experiment: "insert".into(),
            extents: 100_000,
            method: "whole run 0→N",
            mops: measure("insert 1e5", args, insert_repeat, |k| {
                insert_full(k, 100_000, seed)
            }),
            paper_ratio: 6.25 / 0.026,
        });
        let (method, m) = if args.full {
            (
                "whole run 0→N",
                measure("insert 1e6", args, insert_repeat, |k| {
                    insert_full(k, 1_000_000, seed)
                }),
            )
        } else {
            (
                "window from N/2",
                measure("insert 1e6 window", args, insert_repeat, |k| {
                    insert_window(k, 1_000_000, seed)
                }),
            )
        };
        rows.push(Row {
            experiment: "insert".into(),
            extents: 1_000_000,
            method,
            mops: m,
            paper_ratio: 5.26 / 0.0014,
        });
    }
    for (experiment, paper_ratio) in [
        ("append", 14.56 / 14.84),
        ("lookup", 11.7 / 11.8),
        ("range (50)", 7.40 / 7.47),
    ] {
        if !wanted(experiment) {
            continue;
        }
        let mops = measure(experiment, args, r, |k| match experiment {
            "append" => append(k, big),
            "lookup" => reads(k, big, read_ops, seed, false),
            _ => reads(k, big, read_ops, seed, true),
        });
        rows.push(Row {
            experiment: experiment.into(),
            extents: big,
            method: if experiment == "append" {
                "whole run 0→N"
            } else {
                "N appended, random ops"
            },
            mops,
            paper_ratio,
        });
    }
    report(&rows, r);
}

fn report(rows: &[Row], repeat: usize) {
    println!("## paper-flextree: Table 1 of the FlexSpace paper on this machine\n");
    println!(
        "Mops/s, median of {repeat} runs (at most 3 for inserts); 4 KiB extents; node capacities 64/64 for both trees.\n"
    );
    println!("| experiment | extents | method | FlexTree | B+-tree | sorted array | FlexTree / B+-tree | paper's ratio |");
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    for row in rows {
        println!(
            "| {} | {:.0e} | {} | {:.4} | {:.4} | {:.4} | {:.2}× | {:.2}× |",
            row.experiment,
            row.extents as f64,
            row.method,
            row.mops[0],
            row.mops[1],
            row.mops[2],
            row.mops[0] / row.mops[1],
            row.paper_ratio
        );
    }
    println!("\nGoals (issue 2), from the ratios above:");
    for row in rows {
        let ratio = row.mops[0] / row.mops[1];
        let (goal, ok) = match (row.experiment.as_str(), row.extents) {
            ("insert", n) if n < 1_000_000 => ("≥ 100×", ratio >= 100.0),
            ("insert", _) => ("≥ 1000×", ratio >= 1000.0),
            _ => ("within 10% (≥ 0.90×)", ratio >= 0.90),
        };
        println!(
            "- {} at {:.0e}: FlexTree/B+-tree = {ratio:.2}×, goal {goal}: {}",
            row.experiment,
            row.extents as f64,
            if ok { "met" } else { "NOT met" }
        );
    }
}

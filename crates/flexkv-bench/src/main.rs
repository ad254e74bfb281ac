//! `flexkv-bench`: flexkv's benchmarks. Each subcommand reproduces one table or workload
//! and prints its figures with ratios against a baseline measured in the same run.

/// mimalloc, not glibc malloc: the committer frees a memtable and rebuilds intervals
/// continually, and under glibc malloc about 45% of its time went to malloc and free.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod baseline;
mod paper_flexdb;
mod paper_flexspace;
mod paper_flextree;
mod paper_wisckey;
mod wal_sync;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "flexkv-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Table 1 of the FlexSpace paper: FlexTree against a B+-tree without shift values and
    /// a sorted array (insert, append, lookup, range query).
    PaperFlextree(paper_flextree::Args),
    /// Table 2 of the FlexSpace paper: random inserts, random writes and sequential writes
    /// into FlexSpace against a plain file (pwrite, fallocate insert-range, rewriting).
    PaperFlexspace(paper_flexspace::Args),
    /// FlexDB §6.3 for the sorted keyspace alone: fillrandom, overwrite, readrandom,
    /// seekrandom+50, write amplification, index size, recovery time.
    PaperFlexdb(paper_flexdb::Args),
    /// WiscKey §4.1: load and query by value size with separation on and off, scans
    /// against sequential read bandwidth, overwrite with background GC on and off.
    PaperWisckey(paper_wisckey::Args),
    /// Group commit: Sync puts from 1–16 threads against one fdatasync per write.
    WalSync(wal_sync::Args),
    /// Side by side: db_bench workloads and YCSB A–F against every engine in this build
    /// (RocksDB, LMDB, redb, fjall and sled need their cargo features), each engine in a
    /// process of its own.
    Compare(flexkv_bench::compare::Args),
    /// Internal: one engine's run, for `compare`.
    #[command(hide = true)]
    CompareChild(flexkv_bench::compare::ChildArgs),
}

fn main() {
    match Cli::parse().command {
        Command::PaperFlextree(args) => paper_flextree::run(&args),
        Command::PaperFlexspace(args) => paper_flexspace::run(&args),
        Command::WalSync(args) => wal_sync::run(&args),
        Command::PaperFlexdb(args) => paper_flexdb::run(&args),
        Command::PaperWisckey(args) => paper_wisckey::run(&args),
        Command::Compare(args) => flexkv_bench::compare::run(&args),
        Command::CompareChild(args) => flexkv_bench::compare::child(&args),
    }
}

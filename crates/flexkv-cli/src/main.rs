//! `flexkv`: the command-line tool for flexkv databases.
//!
//! `flexkv [--db DIR] [--keyspace NAME] [--hex | --json] <command>`. Keys and values are
//! given and shown as escaped text (see [`escape`]) unless `--hex` is set; `--json`
//! prints results as JSON (keys and values as escaped-text strings). Every error is one
//! line on stderr and a non-zero exit status.

/// mimalloc, not glibc malloc: the committer frees a memtable and rebuilds intervals
/// continually, and under glibc malloc about 45% of its time went to malloc and free.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod escape;
mod transfer;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use escape::Encoding;
use flexkv::{Db, Keyspace};

/// flexkv: a persistent key-value storage engine that keeps data sorted in place.
///
/// Keys and values are escaped text by default: printable ASCII as itself, `\\`, `\t`,
/// `\n`, `\r`, and `\xNN` for any other byte. `--hex` uses hexadecimal instead.
#[derive(Parser, Debug)]
#[command(name = "flexkv", version, about, long_about)]
struct Cli {
    /// The database directory.
    #[arg(long, global = true, default_value = "flexkv-db", env = "FLEXKV_DB")]
    db: PathBuf,
    /// The keyspace to act on.
    #[arg(long, global = true, default_value = "default")]
    keyspace: String,
    /// Keys and values in hexadecimal, in arguments and output.
    #[arg(long, global = true, conflicts_with = "json")]
    hex: bool,
    /// Output as JSON (one object per line for `scan`; JSON lines for `load`/`dump`).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug, PartialEq, Eq)]
enum Command {
    /// Print the version of flexkv and of its on-disk formats.
    Version,
    /// Print the value of KEY.
    Get { key: String },
    /// Set KEY to VALUE (durable when the command returns). Creates the database and the
    /// keyspace if missing.
    Put { key: String, value: String },
    /// Delete KEY.
    Del { key: String },
    /// Print pairs in key order, one per line: key, a tab, value.
    Scan {
        /// Only keys starting with this.
        #[arg(long)]
        prefix: Option<String>,
        /// Only keys at or after this.
        #[arg(long)]
        start: Option<String>,
        /// Only keys before this.
        #[arg(long)]
        end: Option<String>,
        /// At most this many pairs.
        #[arg(long)]
        limit: Option<usize>,
        /// Newest key first.
        #[arg(long)]
        reverse: bool,
    },
    /// Load pairs from FILE (`-` for stdin): lines of key, tab, value, or JSON lines with
    /// `--json`. Nothing is loaded if any line is malformed, unless `--partial`. Pairs
    /// are written in batches of 10,000, each all or nothing: a write that fails (a full
    /// disk) ends the load with how many pairs were written before it.
    Load {
        file: PathBuf,
        /// Load the lines before the first malformed one, then report it.
        #[arg(long)]
        partial: bool,
    },
    /// Write every pair of the keyspace in the format `load` reads back exactly.
    Dump {
        /// Write here instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Print the engine's counters.
    Stats,
    /// Verify every checksum; exits non-zero, naming file and offset, on any problem.
    Check,
    /// Run one value-log garbage collection pass now and report what it reclaimed.
    Gc,
    /// Benchmark flexkv on a temporary database: db_bench workloads and YCSB A–F, with a
    /// table on stdout and an SVG chart (ignores --db).
    Bench(bench::BenchArgs),
}

/// A failure to report: one line, exit status 1.
pub(crate) struct Failure(String);

impl From<flexkv::Error> for Failure {
    fn from(e: flexkv::Error) -> Self {
        Failure(e.to_string())
    }
}

impl From<String> for Failure {
    fn from(s: String) -> Self {
        Failure(s)
    }
}

pub(crate) type CliResult<T = ()> = Result<T, Failure>;

/// A scan's items, forwards or backwards.
type Pairs = Box<dyn Iterator<Item = flexkv::Result<(Vec<u8>, Vec<u8>)>>>;

fn version_text() -> String {
    format!(
        "flexkv {} (formats: MANIFEST 2, WAL 1, value log 1, FlexSpace 1)",
        env!("CARGO_PKG_VERSION")
    )
}

impl Cli {
    fn encoding(&self) -> Encoding {
        if self.hex {
            Encoding::Hex
        } else {
            Encoding::Text
        }
    }

    fn decode(&self, s: &str, what: &str) -> CliResult<Vec<u8>> {
        Ok(self.encoding().decode(s, what)?)
    }

    /// Opens the database; `create` for commands that write.
    fn open(&self, create: bool) -> CliResult<Db> {
        Ok(Db::builder(&self.db).create_if_missing(create).open()?)
    }

    /// Opens the database read-only, for the commands that only read: they change
    /// nothing in its directory, and work on a full disk or a read-only mount.
    fn open_to_read(&self) -> CliResult<Db> {
        Ok(Db::builder(&self.db).read_only(true).open()?)
    }

    /// The keyspace to act on; a missing one is created only if `create`.
    fn keyspace(&self, db: &Db, create: bool) -> CliResult<Keyspace> {
        let known = db.keyspaces();
        if !create && !known.iter().any(|(n, _)| *n == self.keyspace) {
            let names: Vec<_> = known.into_iter().map(|(n, _)| n).collect();
            return Err(Failure(format!(
                "unknown keyspace {:?} (this database has: {})",
                self.keyspace,
                names.join(", ")
            )));
        }
        Ok(db.keyspace(&self.keyspace)?)
    }

    fn pair_line(&self, key: &[u8], value: &[u8]) -> String {
        let enc = self.encoding();
        if self.json {
            serde_json::json!({ "key": enc.encode(key), "value": enc.encode(value) }).to_string()
        } else {
            format!("{}\t{}", enc.encode(key), enc.encode(value))
        }
    }
}

fn run(cli: &Cli) -> CliResult {
    let out = &mut std::io::stdout().lock();
    let Some(command) = &cli.command else {
        println!(
            "flexkv {}: a key-value store; run `flexkv help` for the commands.",
            env!("CARGO_PKG_VERSION")
        );
        return Ok(());
    };
    match command {
        Command::Version => println!("{}", version_text()),
        Command::Get { key } => {
            let key = cli.decode(key, "key")?;
            let db = cli.open_to_read()?;
            let ks = cli.keyspace(&db, false)?;
            let value = ks
                .get(&key)?
                .ok_or_else(|| Failure(format!("key {} not found", cli.encoding().encode(&key))))?;
            let line = if cli.json {
                cli.pair_line(&key, &value)
            } else {
                cli.encoding().encode(&value)
            };
            writeln!(out, "{line}").map_err(|e| Failure(e.to_string()))?;
            db.close()?;
        }
        Command::Put { key, value } => {
            let (key, value) = (cli.decode(key, "key")?, cli.decode(value, "value")?);
            let db = cli.open(true)?;
            cli.keyspace(&db, true)?.put(&key, &value)?;
            db.close()?;
        }
        Command::Del { key } => {
            let key = cli.decode(key, "key")?;
            let db = cli.open(false)?;
            cli.keyspace(&db, false)?.delete(&key)?;
            db.close()?;
        }
        Command::Scan {
            prefix,
            start,
            end,
            limit,
            reverse,
        } => {
            let db = cli.open_to_read()?;
            let ks = cli.keyspace(&db, false)?;
            let it = match prefix {
                Some(p) => ks.prefix(&cli.decode(p, "prefix")?),
                None => {
                    use std::ops::Bound;
                    let lo = match start {
                        Some(s) => Bound::Included(cli.decode(s, "start key")?),
                        None => Bound::Unbounded,
                    };
                    let hi = match end {
                        Some(e) => Bound::Excluded(cli.decode(e, "end key")?),
                        None => Bound::Unbounded,
                    };
                    ks.range::<Vec<u8>, _>((lo, hi))
                }
            };
            // The store is then read no further ahead than the pairs to show.
            let it = match limit {
                Some(l) => it.expecting(*l),
                None => it,
            };
            let start = start
                .as_ref()
                .map(|s| cli.decode(s, "start key"))
                .transpose()?;
            let end = end.as_ref().map(|s| cli.decode(s, "end key")).transpose()?;
            let within = |k: &[u8]| {
                start.as_deref().is_none_or(|s| k >= s) && end.as_deref().is_none_or(|e| k < e)
            };
            let items: Pairs = if *reverse {
                Box::new(it.rev())
            } else {
                Box::new(it)
            };
            let mut shown = 0;
            for item in items {
                if limit.is_some_and(|l| shown >= l) {
                    break;
                }
                let (k, v) = item?;
                if !within(&k) {
                    continue;
                }
                writeln!(out, "{}", cli.pair_line(&k, &v)).map_err(|e| Failure(e.to_string()))?;
                shown += 1;
            }
            db.close()?;
        }
        Command::Load { file, partial } => {
            let input = transfer::read(file, cli.encoding(), cli.json)?;
            input.check(*partial)?;
            let db = cli.open(true)?;
            let ks = cli.keyspace(&db, true)?;
            let n = transfer::load(&db, &ks, input)?;
            db.close()?;
            eprintln!("loaded {n} pairs");
        }
        Command::Dump { output } => {
            let db = cli.open_to_read()?;
            let ks = cli.keyspace(&db, false)?;
            transfer::dump(&ks, output.as_deref(), cli.encoding(), cli.json)?;
            db.close()?;
        }
        Command::Stats => {
            let db = cli.open_to_read()?;
            let s = db.stats();
            let fields: Vec<(&str, serde_json::Value)> = vec![
                ("visible_seq", s.visible_seq.into()),
                ("durable_seq", s.durable_seq.into()),
                ("memtable_entries", s.memtable_entries.into()),
                ("memtable_bytes", s.memtable_bytes.into()),
                ("vlog_live_bytes", s.vlog_live_bytes.into()),
                ("vlog_disk_bytes", s.vlog_disk_bytes.into()),
                ("vlog_garbage_bytes", s.vlog_garbage_bytes.into()),
                ("vlog_segments", s.vlog_segments.len().into()),
                (
                    "vlog_space_amplification",
                    serde_json::Number::from_f64(s.vlog_space_amplification())
                        .map_or(serde_json::Value::Null, serde_json::Value::Number),
                ),
                ("wal_tail_cut", s.wal_tail_cut.into()),
                ("intervals", s.intervals.into()),
                ("index_bytes", s.index_bytes.into()),
                ("space_live_bytes", s.space_live_bytes.into()),
                ("space_extents", s.space_extents.into()),
                ("space_tree_memory_bytes", s.space_tree_memory_bytes.into()),
                ("space_gc_passes", s.space_gc_passes.into()),
                (
                    "space_gc_passes_in_writes",
                    s.space_gc_passes_in_writes.into(),
                ),
                (
                    "space_gc_bytes_relocated",
                    s.space_gc_bytes_relocated.into(),
                ),
                ("keyspaces", db.keyspaces().len().into()),
            ];
            print_fields(out, fields, cli.json)?;
            db.close()?;
        }
        Command::Gc => {
            let db = cli.open(false)?;
            let r = db.gc()?;
            let s = db.stats();
            let fields: Vec<(&str, serde_json::Value)> = vec![
                ("segments_scanned", r.segments_scanned.into()),
                ("segments_removed", r.segments_removed.into()),
                ("segments_skipped", r.segments_skipped.into()),
                ("bytes_relocated", r.bytes_relocated.into()),
                ("bytes_reclaimed", r.bytes_reclaimed.into()),
                ("vlog_disk_bytes", s.vlog_disk_bytes.into()),
                ("vlog_live_bytes", s.vlog_live_bytes.into()),
            ];
            print_fields(out, fields, cli.json)?;
            db.close()?;
        }
        Command::Bench(args) => bench::run(args)?,
        Command::Check => {
            let db = cli.open_to_read()?;
            let r = db.check()?;
            writeln!(
                out,
                "ok: {} WAL records, {} value-log records, {} sorted records, {} separated values read",
                r.wal_records, r.vlog_records, r.sorted_records, r.values_read
            )
            .map_err(|e| Failure(e.to_string()))?;
            db.close()?;
        }
    }
    Ok(())
}

/// Prints named counters as `name: value` lines, or as one JSON object.
fn print_fields(
    out: &mut impl Write,
    fields: Vec<(&str, serde_json::Value)>,
    json: bool,
) -> Result<(), Failure> {
    if json {
        let obj: serde_json::Map<String, serde_json::Value> = fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        writeln!(out, "{}", serde_json::Value::Object(obj))
    } else {
        fields
            .iter()
            .try_for_each(|(k, v)| writeln!(out, "{k}: {v}"))
    }
    .map_err(|e| Failure(e.to_string()))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure(msg)) => {
            eprintln!("flexkv: error: {msg}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn version_and_help_are_answered() {
        let version = Cli::try_parse_from(["flexkv", "--version"]).unwrap_err();
        assert_eq!(version.kind(), clap::error::ErrorKind::DisplayVersion);
        assert!(version.to_string().contains(env!("CARGO_PKG_VERSION")));
        for args in [&["flexkv", "--help"][..], &["flexkv", "help"]] {
            let help = Cli::try_parse_from(args).unwrap_err();
            assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp, "{args:?}");
            assert!(help.to_string().contains("sorted in place"));
        }
        let cli = Cli::try_parse_from(["flexkv", "version"]).unwrap();
        assert_eq!(cli.command, Some(Command::Version));
        assert!(version_text().contains(env!("CARGO_PKG_VERSION")));
        assert!(
            Cli::try_parse_from(["flexkv", "get"]).is_err(),
            "get needs a key"
        );
        assert!(Cli::try_parse_from(["flexkv", "--hex", "--json", "stats"]).is_err());
    }
}

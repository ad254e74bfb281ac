//! `load` and `dump`: a portable text format, one pair per line, that `load` reads back
//! exactly.
//!
//! A dump starts with a comment line `# flexkv dump 1 keyspace=NAME encoding=text|hex`
//! (or `json`), then one line per pair: key, a tab, value, in the named encoding; with
//! `--json`, one object `{"key": ..., "value": ...}` per line holding escaped text.
//! `load` skips `#` lines and empty lines, and takes the encoding from a dump header if
//! there is one (so a hex dump loads back without `--hex`). A malformed line stops the
//! load before anything is written, with its line number; `--partial` writes the lines
//! before it first.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, IsTerminal, Read, Write};
use std::path::Path;

use flexkv::{Db, Durability, Keyspace, WriteBatch};
use indicatif::{ProgressBar, ProgressStyle};

use crate::escape::Encoding;
use crate::{CliResult, Failure};

/// Pairs per batch while loading: large enough to amortize the batch, far under the
/// engine's batch limits.
const BATCH_PAIRS: usize = 10_000;

fn progress(len: Option<u64>, what: &str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = match len {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} {eta}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        ),
        None => ProgressBar::new_spinner(),
    };
    bar.set_message(what.to_string());
    bar
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> Failure + '_ {
    move |e| Failure(format!("{}: {e}", path.display()))
}

/// Parses one line into a pair.
fn parse_line(line: &str, enc: Encoding, json: bool) -> Result<(Vec<u8>, Vec<u8>), String> {
    if json {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| e.to_string())?;
        let field = |name: &str| {
            v.get(name)
                .and_then(|f| f.as_str())
                .ok_or_else(|| format!("no string field {name:?}"))
                .and_then(|s| enc.decode(s, name))
        };
        return Ok((field("key")?, field("value")?));
    }
    let (k, v) = line
        .split_once('\t')
        .ok_or("expected a key, a tab and a value")?;
    if v.contains('\t') {
        return Err("more than one tab".into());
    }
    Ok((enc.decode(k, "key")?, enc.decode(v, "value")?))
}

/// What [`read`] found: the pairs of every well-formed line before the first malformed
/// one, and that line's error.
pub struct Input {
    pairs: Vec<(Vec<u8>, Vec<u8>)>,
    failure: Option<String>,
}

/// Reads and parses the whole of `file` (before any database is opened, so a malformed
/// file changes nothing).
pub fn read(file: &Path, mut enc: Encoding, mut json: bool) -> CliResult<Input> {
    let (reader, len): (Box<dyn Read>, Option<u64>) = if file == Path::new("-") {
        (Box::new(std::io::stdin()), None)
    } else {
        let f = File::open(file).map_err(io_err(file))?;
        let len = f.metadata().ok().map(|m| m.len());
        (Box::new(f), len)
    };
    let bar = progress(len, "reading");
    let mut pairs = Vec::new();
    let mut failure = None;
    for (i, line) in BufReader::new(bar.wrap_read(reader)).lines().enumerate() {
        let line = line.map_err(io_err(file))?;
        if let Some(header) = line.strip_prefix("# flexkv dump ") {
            if header.contains("encoding=hex") {
                enc = Encoding::Hex;
            } else if header.contains("encoding=json") {
                json = true;
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match parse_line(&line, enc, json) {
            Ok(p) => pairs.push(p),
            Err(e) => {
                failure = Some(format!("{}: line {}: {e}", file.display(), i + 1));
                break;
            }
        }
    }
    bar.finish_and_clear();
    Ok(Input { pairs, failure })
}

impl Input {
    /// Refuses the input if a line was malformed, unless `partial`.
    pub fn check(&self, partial: bool) -> CliResult {
        match &self.failure {
            Some(f) if !partial => Err(Failure(format!("{f}; nothing was loaded"))),
            _ => Ok(()),
        }
    }
}

/// Writes the pairs of `input` into `ks`, then syncs; returns how many, or the input's
/// error after writing what came before it. A write or the sync that fails (a full
/// disk) ends the load with the engine's error and how many pairs, in the input's
/// order, were written before it: each batch is all or nothing, so the database holds
/// exactly those once reopened, unless the machine stops before they reach the disk.
pub fn load(db: &Db, ks: &Keyspace, input: Input) -> CliResult<u64> {
    let Input { pairs, failure } = input;
    let bar = progress(Some(pairs.len() as u64), "loading");
    let mut written = 0;
    let midway = |e: flexkv::Error, written: usize| {
        Failure(format!(
            "{e}; the first {written} of {} pairs were written before it, without the \
             load's sync",
            pairs.len()
        ))
    };
    for chunk in pairs.chunks(BATCH_PAIRS) {
        let mut b = WriteBatch::new();
        b.durability(Durability::Buffered);
        for (k, v) in chunk {
            b.put(ks, k, v)?;
        }
        db.write(b).map_err(|e| midway(e, written))?;
        written += chunk.len();
        bar.inc(chunk.len() as u64);
    }
    db.sync().map_err(|e| midway(e, written))?;
    bar.finish_and_clear();
    match failure {
        Some(f) => Err(Failure(format!(
            "{f}; the {} lines before it were loaded",
            pairs.len()
        ))),
        None => Ok(pairs.len() as u64),
    }
}

/// Writes every pair of `ks` to `output` (or stdout).
pub fn dump(ks: &Keyspace, output: Option<&Path>, enc: Encoding, json: bool) -> CliResult {
    let sink: Box<dyn Write> = match output {
        Some(p) => Box::new(File::create(p).map_err(io_err(p))?),
        None => Box::new(std::io::stdout().lock()),
    };
    let name = output.unwrap_or(Path::new("stdout"));
    let mut w = BufWriter::new(sink);
    let format = if json { "json" } else { enc.name() };
    let bar = progress(None, "dumping");
    writeln!(
        w,
        "# flexkv dump 1 keyspace={} encoding={format}",
        ks.name()
    )
    .map_err(io_err(name))?;
    for item in ks.iter() {
        let (k, v) = item?;
        let line = if json {
            serde_json::json!({ "key": enc.encode(&k), "value": enc.encode(&v) }).to_string()
        } else {
            format!("{}\t{}", enc.encode(&k), enc.encode(&v))
        };
        writeln!(w, "{line}").map_err(io_err(name))?;
        bar.inc(1);
    }
    w.flush().map_err(io_err(name))?;
    bar.finish_and_clear();
    Ok(())
}

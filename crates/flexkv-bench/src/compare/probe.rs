//! What the kernel says about this process and its files: bytes written to storage, peak
//! resident memory, and the disk space a directory takes.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

fn field(file: &str, name: &str) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
}

/// Bytes this process (all its threads) caused to be written to storage:
/// `write_bytes` of `/proc/self/io`, counted when a page is dirtied or written directly.
pub fn bytes_written() -> u64 {
    field("/proc/self/io", "write_bytes:").unwrap_or(0)
}

/// The peak resident set size since the last [`reset_peak_rss`] (or since the start).
pub fn peak_rss_kib() -> u64 {
    field("/proc/self/status", "VmHWM:").unwrap_or(0)
}

/// The file pages mapped into this process and resident now (`RssFile`): the page
/// cache's pages that the process reads through mappings (an engine's mapped data
/// files, and its own executable). They count in the resident set, and in its peak,
/// but the kernel can drop them at any time: they are not memory the process holds as
/// `malloc`'s is.
pub fn file_rss_kib() -> u64 {
    field("/proc/self/status", "RssFile:").unwrap_or(0)
}

static RESET_WARNED: AtomicBool = AtomicBool::new(false);

/// Resets the peak resident set size to the current one (writing `5` to
/// `/proc/self/clear_refs`), so each phase reports its own peak. Where the kernel refuses,
/// the peak is the process's since it started, and a warning says so once.
pub fn reset_peak_rss() {
    if std::fs::write("/proc/self/clear_refs", "5").is_err()
        && !RESET_WARNED.swap(true, Ordering::Relaxed)
    {
        eprintln!("warning: cannot reset the peak RSS; each phase reports the peak since start");
    }
}

/// Bytes the files under `dir` take on disk (allocated blocks, so sparse files count what
/// they use).
pub fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&e.path()),
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}

//! What the kernel says about this process and its files: bytes written to storage, peak
//! resident memory, and the disk space a directory takes.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::Duration;

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

/// The resident memory this process holds itself, KiB: the resident set less the
/// mapped file pages (`RssAnon` plus `RssShmem` of `/proc/self/status`), so the heap,
/// the stacks and the memory mapped from the kernel, but not the page cache's pages an
/// engine reads through a mapping, which the kernel can drop whenever it needs them.
pub fn held_rss_kib() -> u64 {
    let Ok(text) = std::fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    let get = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    get("RssAnon:") + get("RssShmem:")
}

/// The largest [`held_rss_kib`] while it runs, sampled on a thread of its own every
/// `every` and once more at [`finish`](Self::finish). The kernel keeps no peak of this
/// part of the resident set (its `VmHWM` counts the file pages too), so a spike shorter
/// than `every` between two samples can go unseen.
pub struct HeldPeak {
    stop: mpsc::Sender<()>,
    thread: JoinHandle<u64>,
}

impl HeldPeak {
    /// Starts sampling.
    pub fn start(every: Duration) -> HeldPeak {
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let mut peak = held_rss_kib();
            loop {
                match stopped.recv_timeout(every) {
                    Err(RecvTimeoutError::Timeout) => peak = peak.max(held_rss_kib()),
                    _ => return peak.max(held_rss_kib()),
                }
            }
        });
        HeldPeak { stop, thread }
    }

    /// Stops sampling and returns the peak, KiB (0 if the sampling thread panicked).
    pub fn finish(self) -> u64 {
        drop(self.stop);
        self.thread.join().unwrap_or(0)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// These tests measure the whole process: one at a time.
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

    /// 64 MiB mapped from the kernel and written, so every page is resident until
    /// the mapping is dropped (an allocator might keep freed memory).
    fn held() -> memmap2::MmapMut {
        let mut m = memmap2::MmapMut::map_anon(64 << 20).unwrap();
        m.fill(1);
        m
    }

    /// Samples every `every` while 64 MiB are held: with `hold`, for that long before
    /// they are dropped and then the sampling finishes; without, the sampling finishes
    /// first. Returns the memory held before, the peak, and the memory held at the end.
    fn around_held(every: Duration, hold: Option<Duration>) -> (u64, u64, u64) {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let peak = HeldPeak::start(every);
        let before = held_rss_kib();
        let m = held();
        let got = match hold {
            Some(d) => {
                std::thread::sleep(d);
                drop(m);
                peak.finish()
            }
            None => {
                let got = peak.finish();
                drop(m);
                got
            }
        };
        (before, got, held_rss_kib())
    }

    #[test]
    fn held_peak_sees_memory_held_when_it_finishes() {
        let (before, got, _) = around_held(Duration::from_secs(3600), None);
        assert!(
            got >= before + (48 << 10),
            "peak {got} KiB, {before} KiB before"
        );
    }

    #[test]
    fn held_peak_sees_memory_held_only_between_samples() {
        let hold = Some(Duration::from_millis(300));
        let (before, got, after) = around_held(Duration::from_millis(5), hold);
        assert!(
            after < before + (16 << 10),
            "the memory went back: {after} KiB"
        );
        assert!(
            got >= before + (48 << 10),
            "peak {got} KiB, {before} KiB before"
        );
    }

    #[test]
    fn held_memory_leaves_out_mapped_file_pages() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut &file, &vec![7u8; 64 << 20]).unwrap();
        #[allow(unsafe_code)]
        // SAFETY: nothing changes the temporary file while it is mapped.
        let map = unsafe { memmap2::Mmap::map(&file) }.unwrap();
        let (held, files) = (held_rss_kib(), file_rss_kib());
        let sum: u64 = map.iter().step_by(4096).map(|&b| u64::from(b)).sum();
        assert_eq!(sum, 7 * (64 << 20) / 4096);
        let (held_now, files_now) = (held_rss_kib(), file_rss_kib());
        assert!(
            files_now >= files + (48 << 10),
            "the pages read are resident: {files_now} KiB"
        );
        assert!(
            held_now < held + (16 << 10),
            "and not held: {held_now} KiB, {held} before"
        );
    }
}

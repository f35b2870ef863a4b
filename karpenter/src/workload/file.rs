//! A `--workload FILE` opened for the reader, bounded before anything is parsed: only a regular
//! file or a pipe is read (a device such as `/dev/zero` is refused unread), at most
//! [`MAX_WORKLOAD_BYTES`] of it (a regular file by its size, a pipe at the first byte past the
//! limit), and its objects are streamed to the caller's sink as YAML or as a trace, told apart
//! by the extension or the first line.

use std::fs::{File, Metadata};
use std::io::{BufReader, Read};
use std::path::Path;

use super::manifest::{LimitExceeded, MAX_WORKLOAD_BYTES, Manifest, WorkloadError};
use super::parse::{Sink, is_trace, read_trace, read_yaml};

/// Bytes read ahead to tell a trace by its header (`name,cpu_milli,memory_mib`).
const HEAD: u64 = 64;

/// Read a workload file (YAML or trace CSV) whole, with no pod cap (the size limit still
/// applies).
///
/// Errors: see [`read_file`].
pub fn load(path: &Path) -> Result<Vec<Manifest>, WorkloadError> {
    let mut out = Vec::new();
    read_file(path, &mut |m| {
        out.push(m);
        Ok(())
    })?;
    Ok(out)
}

/// Stream the objects of the workload file at `path` into `sink`, one at a time as they are
/// read (see [`super::parse`]); reading stops at the first error, `sink`'s included.
///
/// Errors: [`WorkloadError::NotAFile`] for anything but a regular file or a pipe;
/// [`WorkloadError::TooLarge`] past [`MAX_WORKLOAD_BYTES`]; [`WorkloadError::Io`] when it cannot
/// be opened or read; a document or row that does not parse; [`WorkloadError::Empty`] when it
/// holds nothing to run; whatever `sink` returns.
pub(super) fn read_file(path: &Path, sink: &mut Sink<'_>) -> Result<(), WorkloadError> {
    read_file_within(path, MAX_WORKLOAD_BYTES, sink)
}

/// [`read_file`] with `limit` bytes in place of [`MAX_WORKLOAD_BYTES`].
fn read_file_within(path: &Path, limit: u64, sink: &mut Sink<'_>) -> Result<(), WorkloadError> {
    let shown = path.display().to_string();
    // Looked at before opening: opening some devices already acts.
    let meta = std::fs::metadata(path).map_err(|e| WorkloadError::reading(&shown, e))?;
    if let Some(what) = not_readable(&meta) {
        return Err(WorkloadError::NotAFile { path: shown, what });
    }
    if meta.is_file() && meta.len() > limit {
        return Err(WorkloadError::TooLarge { path: shown, limit });
    }
    let file = File::open(path).map_err(|e| WorkloadError::reading(&shown, e))?;
    let mut input = Bounded::new(file, limit);
    let mut head = Vec::new();
    (&mut input)
        .take(HEAD)
        .read_to_end(&mut head)
        .map_err(|e| WorkloadError::reading(&shown, e))?;
    let trace = is_trace(path, &String::from_utf8_lossy(&head));
    let input = std::io::Cursor::new(head).chain(input);
    let mut objects = 0_u64;
    let mut counted = |m: Manifest| {
        objects += 1;
        sink(m)
    };
    if trace {
        read_trace(path, input, &mut counted)?;
    } else {
        read_yaml(path, BufReader::new(input), &mut counted)?;
    }
    if objects == 0 {
        return Err(WorkloadError::Empty { path: shown, trace });
    }
    Ok(())
}

/// What the file is when it is not something the reader takes (a regular file, or a pipe such
/// as a shell's `<(...)`), e.g. `a character device`.
fn not_readable(meta: &Metadata) -> Option<&'static str> {
    let kind = meta.file_type();
    if kind.is_file() {
        return None;
    }
    if kind.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return None;
        }
        if kind.is_char_device() {
            return Some("a character device");
        }
        if kind.is_block_device() {
            return Some("a block device");
        }
        if kind.is_socket() {
            return Some("a socket");
        }
    }
    Some("not a regular file")
}

/// A reader that passes at most `limit` bytes through and fails with [`LimitExceeded`] (kind
/// [`std::io::ErrorKind::FileTooLarge`]) when the input holds more.
struct Bounded<R> {
    /// The input with one byte more than the limit allowed, to tell "exactly the limit" from
    /// "more".
    inner: std::io::Take<R>,
    limit: u64,
}

impl<R: Read> Bounded<R> {
    fn new(inner: R, limit: u64) -> Self {
        Bounded {
            inner: inner.take(limit.saturating_add(1)),
            limit,
        }
    }
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if self.inner.limit() == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                LimitExceeded(self.limit),
            ));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_with_nothing_to_run_is_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let yaml = dir.path().join("empty.yaml");
        std::fs::write(&yaml, "# only a comment\n---\n").expect("write");
        let err = load(&yaml).expect_err("empty");
        assert!(
            err.to_string()
                .ends_with("empty.yaml: no Kubernetes objects in the file (it is empty or holds only comments): nothing to run"),
            "{err}"
        );
        let csv = dir.path().join("failed.csv");
        std::fs::write(
            &csv,
            "name,cpu_milli,memory_mib,num_gpu,pod_phase\nx,1,1,0,Failed\n",
        )
        .expect("write");
        let err = load(&csv).expect_err("every task failed");
        assert!(
            err.to_string()
                .contains("failed.csv: no tasks in the trace"),
            "{err}"
        );
    }

    #[test]
    fn a_trace_is_told_by_its_header_whatever_its_name() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("tasks.txt");
        std::fs::write(&path, "name,cpu_milli,memory_mib\na,100,64\nb,200,128\n").expect("write");
        let pods = load(&path).expect("a trace");
        assert_eq!(
            pods.iter().map(Manifest::name).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(pods[1].index, 3);
    }

    #[test]
    fn a_file_larger_than_the_limit_is_refused_by_its_size_unread() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("big.yaml");
        // Sparse: no data is written to disk.
        let file = File::create(&path).expect("create");
        file.set_len(MAX_WORKLOAD_BYTES + 1).expect("size");
        let err = load(&path).expect_err("over the limit");
        assert_eq!(
            err.to_string(),
            format!(
                "{}: more than 64 MiB, the most a workload file may hold; write many alike pods \
                 as the replicas of one Deployment or Job rather than one Pod document each",
                path.display()
            )
        );
        // A file of exactly the limit reads; one byte more does not.
        let small = dir.path().join("small.yaml");
        std::fs::write(
            &small,
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n",
        )
        .expect("write");
        let len = std::fs::metadata(&small).expect("size").len();
        let mut n = 0;
        read_file_within(&small, len, &mut |_| {
            n += 1;
            Ok(())
        })
        .expect("a file of exactly the limit reads");
        assert_eq!(n, 1);
        let err = read_file_within(&small, len - 1, &mut |_| Ok(())).expect_err("one byte over");
        assert!(matches!(err, WorkloadError::TooLarge { limit, .. } if limit == len - 1));
    }

    #[cfg(unix)]
    #[test]
    fn devices_and_directories_are_refused_unread() {
        let err = load(Path::new("/dev/zero")).expect_err("a device");
        assert_eq!(
            err.to_string(),
            "/dev/zero: is a character device, not a workload file; --workload reads a regular \
             file (or a pipe, up to 64 MiB)"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let err = load(dir.path()).expect_err("a directory");
        assert!(
            err.to_string()
                .contains("is a directory, not a workload file"),
            "{err}"
        );
    }

    /// A named pipe in a fresh directory, and a thread that writes `unit` into it over and over
    /// until `total` bytes are written or the reader goes away; it returns the bytes written.
    #[cfg(unix)]
    fn pipe_of(
        name: &str,
        head: &'static str,
        unit: &'static str,
        total: usize,
    ) -> (
        tempfile::TempDir,
        std::path::PathBuf,
        std::thread::JoinHandle<usize>,
    ) {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join(name);
        let made = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .expect("mkfifo runs");
        assert!(made.success(), "mkfifo {}", path.display());
        let writer_path = path.clone();
        let writer = std::thread::spawn(move || {
            let mut pipe = File::create(&writer_path).expect("open the pipe for writing");
            let mut written = 0;
            if pipe.write_all(head.as_bytes()).is_err() {
                return written;
            }
            written += head.len();
            let chunk = unit.repeat(4096 / unit.len() + 1);
            while written < total {
                match pipe.write(chunk.as_bytes()) {
                    Ok(n) => written += n,
                    Err(_) => break,
                }
            }
            written
        });
        (dir, path, writer)
    }

    #[cfg(unix)]
    #[test]
    fn a_pipe_is_read_only_up_to_the_refused_pod_and_at_most_up_to_the_limit() {
        // 8 MiB of trace offered; the reader stops at the 11th task and closes the pipe.
        let (_dir, path, writer) = pipe_of(
            "trace.csv",
            "name,cpu_milli,memory_mib\n",
            "t,100,64\n",
            8 << 20,
        );
        let mut pods = 0;
        let err = load_capped(&path, 10, &mut pods).expect_err("11 tasks");
        assert!(err.to_string().contains("line 12: Pod \"t\""), "{err}");
        assert_eq!(pods, 10);
        let written = writer.join().expect("writer");
        assert!(written < 1 << 20, "the trace was read on: {written} bytes");

        // An endless pipe of comments (no object, so no cap applies) stops at the limit.
        let (_dir, path, writer) = pipe_of("endless.yaml", "", "# nothing\n", 4 << 20);
        let err = read_file_within(&path, 64 << 10, &mut |_| Ok(())).expect_err("too large");
        assert_eq!(
            err.to_string(),
            format!(
                "{}: more than 65536 bytes, the most a workload file may hold; write many alike \
                 pods as the replicas of one Deployment or Job rather than one Pod document each",
                path.display()
            )
        );
        let written = writer.join().expect("writer");
        assert!(written < 1 << 20, "the pipe was read on: {written} bytes");
    }

    /// [`read_file`] with a sink that refuses the object after the first `cap`, counting the
    /// ones it kept in `kept`.
    #[cfg(unix)]
    fn load_capped(path: &Path, cap: u32, kept: &mut u32) -> Result<(), WorkloadError> {
        read_file(path, &mut |m| {
            if *kept == cap {
                return Err(WorkloadError::OverCap {
                    what: m.describe(),
                    pods: u64::from(cap) + 1,
                    cap,
                });
            }
            *kept += 1;
            Ok(())
        })
    }
}

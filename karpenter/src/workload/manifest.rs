//! One object of a workload file with where it came from, and every way a workload can be
//! refused, including the largest file the reader takes ([`MAX_WORKLOAD_BYTES`]): the floor the
//! reader's parts ([`super::file`], [`super::parse`], [`super::pods`], [`super::defaults`],
//! [`super::admit`]) share.

use std::path::PathBuf;

use serde_json::Value;

/// One object from a workload file, with where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Manifest {
    /// The object as JSON, as written (a trace row becomes a bare Pod).
    pub object: Value,
    /// File it came from (`<bundled>` for built-in workloads).
    pub source: PathBuf,
    /// 1-based document number (YAML) or line number (CSV).
    pub index: usize,
}

impl Manifest {
    /// The object's `kind`, e.g. `Deployment`; empty when missing.
    pub fn kind(&self) -> &str {
        self.object
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// The object's `apiVersion`, e.g. `apps/v1`; empty when missing.
    pub fn api_version(&self) -> &str {
        self.object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// `metadata.name`, or `metadata.generateName` when it has no name; empty when neither.
    pub fn name(&self) -> &str {
        ["name", "generateName"]
            .iter()
            .find_map(|f| {
                self.object
                    .pointer(&format!("/metadata/{f}"))
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
            })
            .unwrap_or("")
    }

    /// `<file>: document <n>` (or `line <n>` for CSV), for error messages.
    pub fn location(&self) -> String {
        let what = if self.source.extension().is_some_and(|e| e == "csv") {
            "line"
        } else {
            "document"
        };
        format!("{}: {what} {}", self.source.display(), self.index)
    }

    /// `<file>: document <n>: <Kind> "<name>"`, naming the object in an error message.
    pub fn describe(&self) -> String {
        format!("{}: {} {:?}", self.location(), self.kind(), self.name())
    }
}

/// The most a workload file may hold: 64 MiB. A file (or a pipe) is read up to this many bytes
/// and refused at the next one, so an endless input (`/dev/zero` through a pipe) costs at most
/// this much memory. It holds about 100,000 bare Pods written out as YAML, or a million trace
/// rows, while the pod cap (`--max-pods`) stops reading far earlier; the bundled Online Boutique
/// is 20 KB and the published Alibaba `openb_pod_list` traces are under 600 KB.
pub const MAX_WORKLOAD_BYTES: u64 = 64 << 20;

/// A workload that cannot be used. Every variant names the file and, for one object, the
/// document (or CSV line) and the object; `karpenter sandbox` and `karpenter simulate` print
/// the same message for the same file.
#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Io {
        /// The file as given on the command line.
        path: String,
        /// Why it cannot be read (not found, permission denied, ...).
        source: std::io::Error,
    },
    /// The file is something other than a regular file or a pipe (a device such as `/dev/zero`,
    /// a directory or a socket): refused before anything is read from it.
    #[error(
        "{path}: is {what}, not a workload file; --workload reads a regular file (or a pipe, up \
         to {})",
        size(&MAX_WORKLOAD_BYTES)
    )]
    NotAFile {
        /// The file as given on the command line.
        path: String,
        /// What it is instead, e.g. `a character device`.
        what: &'static str,
    },
    /// The file holds more than `limit` bytes ([`MAX_WORKLOAD_BYTES`]): refused without reading a
    /// regular file further than its size, and a pipe at the first byte past the limit.
    #[error(
        "{path}: more than {}, the most a workload file may hold; write many alike pods as the \
         replicas of one Deployment or Job rather than one Pod document each",
        size(.limit)
    )]
    TooLarge {
        /// The file as given on the command line.
        path: String,
        /// The limit in bytes ([`MAX_WORKLOAD_BYTES`] outside tests).
        limit: u64,
    },
    /// A YAML document does not parse or is not a Kubernetes object.
    #[error("{path}: document {index}: {message}")]
    Document {
        /// The file as given on the command line.
        path: String,
        /// 1-based document number.
        index: usize,
        /// What is wrong, e.g. `invalid YAML: ...` or `kind is required`.
        message: String,
    },
    /// A CSV row is malformed.
    #[error("{path}: line {line}: {message}")]
    Csv {
        /// The file as given on the command line.
        path: String,
        /// 1-based line number (the header is line 1).
        line: usize,
        /// What is wrong: the CSV reader's error, or `requests must not be negative`.
        message: String,
    },
    /// A file with nothing in it to run: no object (YAML), or no task that did not fail (trace).
    #[error("{path}: {}", nothing_in(.trace))]
    Empty {
        /// The file as given on the command line.
        path: String,
        /// Whether the file is an Alibaba trace (CSV) rather than YAML.
        trace: bool,
    },
    /// A replica count (`spec.replicas`, or a Job's `spec.parallelism`) that is not an int32
    /// of at least 0, the range Kubernetes accepts.
    #[error("{object}: {field}: Invalid value: {value}: must be an int32 from 0 to 2147483647")]
    Replicas {
        /// `<file>: document <n>: <Kind> "<name>"`.
        object: String,
        /// `spec.replicas` or `spec.parallelism`.
        field: String,
        /// The value as written (JSON).
        value: String,
    },
    /// The workload runs more pods than `--max-pods` allows; refused before any pod exists.
    #[error("{what} brings the workload to {pods} pods, over the cap of {cap} (--max-pods)")]
    OverCap {
        /// The object that crossed the cap (`<file>: document <n>: <Kind> "<name>"`), or the
        /// generator (`--generate diverse:<n>`).
        what: String,
        /// Pods counted up to and including `what` (replicas after `--scale`).
        pods: u64,
        /// The cap (`--max-pods`).
        cap: u32,
    },
    /// An object the API server refuses: a kind it does not serve, a duplicate name, an
    /// invalid name or field (the sandbox's admission, as kube-apiserver words it).
    #[error("{location}: {message}")]
    Refused {
        /// `<file>: document <n>` (or `line <n>`).
        location: String,
        /// The API server's message, e.g. `pods "web" already exists`.
        message: String,
    },
    /// The bundled defaults or CRDs cannot be read or installed: a build defect.
    #[error("bundled manifests: {0}")]
    Bundled(String),
}

impl WorkloadError {
    /// A read of `path` that failed: [`WorkloadError::TooLarge`] when the size-bounded reader
    /// gave up (its error carries [`LimitExceeded`]), else [`WorkloadError::Io`].
    pub(super) fn reading(path: &str, source: std::io::Error) -> WorkloadError {
        let path = path.to_string();
        match source
            .get_ref()
            .and_then(|e| e.downcast_ref::<LimitExceeded>())
        {
            Some(&LimitExceeded(limit)) => WorkloadError::TooLarge { path, limit },
            None => WorkloadError::Io { path, source },
        }
    }
}

/// The error a size-bounded reader fails with (kind [`std::io::ErrorKind::FileTooLarge`]) at
/// the first byte past its limit, in bytes; [`WorkloadError::reading`] turns it into
/// [`WorkloadError::TooLarge`].
#[derive(Debug, thiserror::Error)]
#[error("more than {} read", size(&self.0))]
pub(super) struct LimitExceeded(pub u64);

/// `bytes` for a message: `64 MiB` for a whole number of MiB, else `<n> bytes`.
fn size(bytes: &u64) -> String {
    let bytes = *bytes;
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{bytes} bytes")
    }
}

/// What an empty workload file lacks, by format.
fn nothing_in(trace: &bool) -> &'static str {
    if *trace {
        "no tasks in the trace (no rows, or every task Failed): nothing to run"
    } else {
        "no Kubernetes objects in the file (it is empty or holds only comments): nothing to run"
    }
}

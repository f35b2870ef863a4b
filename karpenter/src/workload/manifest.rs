//! One object of a workload file with where it came from, and every way a workload can be
//! refused: the floor the reader's parts ([`super::parse`], [`super::pods`],
//! [`super::defaults`], [`super::admit`]) share.

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

/// What an empty workload file lacks, by format.
fn nothing_in(trace: &bool) -> &'static str {
    if *trace {
        "no tasks in the trace (no rows, or every task Failed): nothing to run"
    } else {
        "no Kubernetes objects in the file (it is empty or holds only comments): nothing to run"
    }
}

//! Workloads for `karpenter sandbox`: multi-document Kubernetes YAML, or an Alibaba
//! `openb_pod_list` CSV trace turned into one pod per task that did not fail; plus the bundled
//! Online Boutique and the default NodePool. Every error names the file and document (or line).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

/// The bundled Online Boutique manifests (Apache-2.0, GoogleCloudPlatform/microservices-demo).
pub const ONLINE_BOUTIQUE: &str = include_str!("../../examples/workloads/online-boutique.yaml");
/// The NodePool and EC2NodeClass created when a workload brings none (upstream's
/// getting-started NodePool: c, m and r types of generation 3 or later).
pub const DEFAULT_NODEPOOL: &str = include_str!("../../examples/nodepools/default.yaml");
/// The NodePool of NVIDIA GPU types added next to [`DEFAULT_NODEPOOL`] when a workload that
/// brings no NodePool requests `nvidia.com/gpu`.
pub const GPU_NODEPOOL: &str = include_str!("../../examples/nodepools/gpu.yaml");

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

    /// `<file>: document <n>` (or `line <n>` for CSV), for error messages.
    pub fn location(&self) -> String {
        let what = if self.source.extension().is_some_and(|e| e == "csv") {
            "line"
        } else {
            "document"
        };
        format!("{}: {what} {}", self.source.display(), self.index)
    }
}

/// A workload file that cannot be used.
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
}

/// Split a YAML stream into documents on `---` separator lines.
fn documents(text: &str) -> Vec<String> {
    let mut docs = vec![String::new()];
    for line in text.lines() {
        let trimmed = line.trim_end();
        if trimmed == "---" || trimmed.starts_with("--- ") {
            docs.push(String::new());
            continue;
        }
        if let Some(d) = docs.last_mut() {
            d.push_str(line);
            d.push('\n');
        }
    }
    docs
}

fn is_blank(doc: &str) -> bool {
    doc.lines().all(|l| {
        let t = l.trim();
        t.is_empty() || t.starts_with('#')
    })
}

/// Parse multi-document YAML into Kubernetes objects; `kind: List` documents are expanded.
///
/// Errors: a document that is not valid YAML, not a mapping, or lacks `apiVersion`, `kind` or
/// a name.
pub fn parse_yaml(source: &Path, text: &str) -> Result<Vec<Manifest>, WorkloadError> {
    let path = source.display().to_string();
    let mut out = Vec::new();
    for (i, doc) in documents(text).iter().enumerate() {
        let index = i + 1;
        if is_blank(doc) {
            continue;
        }
        let err = |message: String| WorkloadError::Document {
            path: path.clone(),
            index,
            message,
        };
        let value: Value =
            serde_saphyr::from_str(doc).map_err(|e| err(format!("invalid YAML: {e}")))?;
        let items = if value.get("kind").and_then(Value::as_str) == Some("List") {
            value
                .get("items")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        } else {
            vec![value]
        };
        for object in items {
            if !object.is_object() {
                return Err(err("expected a Kubernetes object (a mapping)".into()));
            }
            for field in ["apiVersion", "kind"] {
                if object
                    .get(field)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    return Err(err(format!("{field} is required")));
                }
            }
            let named = ["name", "generateName"].iter().any(|f| {
                object
                    .pointer(&format!("/metadata/{f}"))
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty())
            });
            if !named {
                return Err(err("metadata.name is required".into()));
            }
            out.push(Manifest {
                object,
                source: source.to_path_buf(),
                index,
            });
        }
    }
    Ok(out)
}

/// One row of an `openb_pod_list` file. The published variants differ in columns: every one
/// has `name,cpu_milli,memory_mib,num_gpu,gpu_milli`; some add `gpu_spec`, `qos`, `pod_phase`,
/// `creation_time`, `deletion_time`, `scheduled_time`. A missing (or empty) column is absent:
/// no GPUs, no phase (the task is kept). Columns not read here are ignored.
#[derive(Deserialize)]
struct TraceRow {
    name: String,
    cpu_milli: i64,
    memory_mib: i64,
    #[serde(default)]
    num_gpu: Option<i64>,
    #[serde(default)]
    pod_phase: Option<String>,
}

/// Whether a file is an Alibaba `openb_pod_list` trace (by extension or header).
pub fn is_trace(path: &Path, text: &str) -> bool {
    path.extension().is_some_and(|e| e == "csv") || text.starts_with("name,cpu_milli,memory_mib")
}

/// One bare pod per trace row whose phase is not `Failed` (a file without `pod_phase` keeps
/// every row), requesting `cpu_milli` millicores, `memory_mib` MiB and `num_gpu` as
/// `nvidia.com/gpu` (requests and limits, as extended resources require). Any variant of the
/// published files reads: see `TraceRow` for the columns.
///
/// Errors: a row that does not parse (a required column `name`, `cpu_milli`, `memory_mib`
/// missing or not a number), or negative requests.
pub fn parse_trace(source: &Path, text: &str) -> Result<Vec<Manifest>, WorkloadError> {
    let path = source.display().to_string();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let mut out = Vec::new();
    for (i, row) in reader.deserialize::<TraceRow>().enumerate() {
        let line = i + 2;
        let row = row.map_err(|e| WorkloadError::Csv {
            path: path.clone(),
            line,
            message: e.to_string(),
        })?;
        if row.pod_phase.as_deref() == Some("Failed") {
            continue;
        }
        let num_gpu = row.num_gpu.unwrap_or(0);
        if row.cpu_milli < 0 || row.memory_mib < 0 || num_gpu < 0 {
            return Err(WorkloadError::Csv {
                path: path.clone(),
                line,
                message: "requests must not be negative".into(),
            });
        }
        let mut requests = json!({"cpu": format!("{}m", row.cpu_milli), "memory": format!("{}Mi", row.memory_mib)});
        let mut limits = json!({});
        if num_gpu > 0 {
            requests["nvidia.com/gpu"] = json!(num_gpu.to_string());
            limits["nvidia.com/gpu"] = json!(num_gpu.to_string());
        }
        let mut resources = json!({"requests": requests});
        if num_gpu > 0 {
            resources["limits"] = limits;
        }
        let object = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": row.name, "labels": {"app.kubernetes.io/name": "openb-task", "trace": "alibaba-openb"}},
            "spec": {"containers": [{"name": "task", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.2", "resources": resources}]},
        });
        out.push(Manifest {
            object,
            source: source.to_path_buf(),
            index: line,
        });
    }
    Ok(out)
}

/// Read a workload file (YAML or trace CSV).
///
/// Errors: see [`WorkloadError`].
pub fn load(path: &Path) -> Result<Vec<Manifest>, WorkloadError> {
    let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Io {
        path: path.display().to_string(),
        source,
    })?;
    if is_trace(path, &text) {
        parse_trace(path, &text)
    } else {
        parse_yaml(path, &text)
    }
}

/// Multiply the replicas of Deployments, ReplicaSets and StatefulSets by `factor`.
pub fn scale(manifests: &mut [Manifest], factor: u32) {
    for m in manifests.iter_mut() {
        if matches!(m.kind(), "Deployment" | "ReplicaSet" | "StatefulSet") {
            let replicas = m
                .object
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            m.object["spec"]["replicas"] = json!(replicas * i64::from(factor));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundled_workloads_parse() {
        let ob =
            parse_yaml(Path::new("<bundled>"), ONLINE_BOUTIQUE).expect("online boutique parses");
        assert_eq!(ob.iter().filter(|m| m.kind() == "Deployment").count(), 12);
        let np =
            parse_yaml(Path::new("<bundled>"), DEFAULT_NODEPOOL).expect("default nodepool parses");
        assert_eq!(
            np.iter().map(Manifest::kind).collect::<Vec<_>>(),
            vec!["NodePool", "EC2NodeClass"]
        );
        let gpu = parse_yaml(Path::new("<bundled>"), GPU_NODEPOOL).expect("gpu nodepool parses");
        assert_eq!(
            gpu.iter().map(Manifest::kind).collect::<Vec<_>>(),
            vec!["NodePool"]
        );
    }

    #[test]
    fn malformed_documents_are_located() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n# comment only\n---\napiVersion: v1\nkind: Pod\nmetadata: [oops\n";
        let err = parse_yaml(Path::new("bad.yaml"), text).expect_err("third document is broken");
        let msg = err.to_string();
        assert!(
            msg.starts_with("bad.yaml: document 3: invalid YAML"),
            "{msg}"
        );
        let missing = parse_yaml(Path::new("m.yaml"), "kind: Pod\nmetadata: {name: p}\n")
            .expect_err("no apiVersion");
        assert_eq!(
            missing.to_string(),
            "m.yaml: document 1: apiVersion is required"
        );
    }

    #[test]
    fn trace_rows_become_pods_except_failed_ones() {
        let text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n\
            p0,12000,16384,1,1000,,LS,Running,0,1,0\np1,1000,100,0,0,,BE,Failed,0,1,0\np2,500,256,0,0,,BE,Succeeded,0,1,0\n";
        let pods = parse_trace(Path::new("t.csv"), text).expect("parses");
        assert_eq!(pods.len(), 2);
        assert_eq!(
            pods[0].object["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"],
            "1"
        );
        assert_eq!(
            pods[0].object["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "12000m"
        );
        assert!(
            pods[1].object["spec"]["containers"][0]["resources"]
                .get("limits")
                .is_none()
        );
        let bad = parse_trace(
            Path::new("t.csv"),
            "name,cpu_milli,memory_mib,num_gpu,pod_phase\np,x,1,0,Running\n",
        )
        .expect_err("bad row");
        assert!(bad.to_string().starts_with("t.csv: line 2:"), "{bad}");
    }

    #[test]
    fn a_minimal_columns_trace_reads_with_missing_columns_absent() {
        // The published variants with only these five columns: no phase (every row kept), no
        // QoS or times; an empty GPU count is no GPU.
        let text = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n\
            p0,4000,8192,2,1000\np1,500,256,0,0\np2,250,128,,\n";
        let pods = parse_trace(Path::new("minimal.csv"), text).expect("parses");
        assert_eq!(pods.len(), 3);
        let resources = |i: usize| &pods[i].object["spec"]["containers"][0]["resources"];
        assert_eq!(resources(0)["requests"]["nvidia.com/gpu"], "2");
        assert_eq!(resources(0)["limits"]["nvidia.com/gpu"], "2");
        assert_eq!(resources(1)["requests"]["memory"], "256Mi");
        assert!(resources(2)["requests"].get("nvidia.com/gpu").is_none());
        assert!(resources(2).get("limits").is_none());
        // A required column missing is an error that names the file and line.
        let err = parse_trace(Path::new("m.csv"), "name,cpu_milli\np,1\n").expect_err("no memory");
        assert!(err.to_string().starts_with("m.csv: line 2:"), "{err}");
    }

    #[test]
    fn scale_multiplies_replicas() {
        let mut ms = parse_yaml(Path::new("<bundled>"), ONLINE_BOUTIQUE).expect("parses");
        scale(&mut ms, 10);
        let total: i64 = ms
            .iter()
            .filter(|m| m.kind() == "Deployment")
            .filter_map(|m| m.object.pointer("/spec/replicas").and_then(Value::as_i64))
            .sum();
        assert_eq!(total, 120);
    }
}

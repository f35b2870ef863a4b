//! Workload files into objects: multi-document Kubernetes YAML, or an Alibaba `openb_pod_list`
//! CSV trace turned into one bare pod per task that did not fail. Every error names the file
//! and document (or line).

use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use super::manifest::{Manifest, WorkloadError};

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
/// Blank and comment-only documents are skipped, so the result may be empty.
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
            let m = Manifest {
                object,
                source: source.to_path_buf(),
                index,
            };
            if m.name().is_empty() {
                return Err(err("metadata.name is required".into()));
            }
            out.push(m);
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
    parse_trace_within(source, text, u64::MAX)
}

/// [`parse_trace`], stopping once more than `limit` pods are read (the caller's pod cap then
/// refuses the last one read, naming its line), so a huge trace is refused without building
/// a pod per row.
pub(super) fn parse_trace_within(
    source: &Path,
    text: &str,
    limit: u64,
) -> Result<Vec<Manifest>, WorkloadError> {
    let path = source.display().to_string();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let mut out = Vec::new();
    for (i, row) in reader.deserialize::<TraceRow>().enumerate() {
        if out.len() as u64 > limit {
            break;
        }
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
/// Errors: see [`WorkloadError`]; a file with nothing to run is [`WorkloadError::Empty`].
pub fn load(path: &Path) -> Result<Vec<Manifest>, WorkloadError> {
    load_within(path, u64::MAX)
}

/// [`load`], reading at most `limit` + 1 pods of a trace (see [`parse_trace_within`]).
pub(super) fn load_within(path: &Path, limit: u64) -> Result<Vec<Manifest>, WorkloadError> {
    let text = std::fs::read_to_string(path).map_err(|source| WorkloadError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let trace = is_trace(path, &text);
    let manifests = if trace {
        parse_trace_within(path, &text, limit)?
    } else {
        parse_yaml(path, &text)?
    };
    if manifests.is_empty() {
        return Err(WorkloadError::Empty {
            path: path.display().to_string(),
            trace,
        });
    }
    Ok(manifests)
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_limited_trace_stops_one_pod_past_the_limit_skipping_failed_tasks() {
        let text = "name,cpu_milli,memory_mib,num_gpu,pod_phase\n\
            a,1,1,0,Running\nb,1,1,0,Failed\nc,1,1,0,Running\nd,1,1,0,Running\ne,1,1,0,Running\n";
        let pods = parse_trace_within(Path::new("t.csv"), text, 2).expect("parses");
        let names: Vec<&str> = pods.iter().map(Manifest::name).collect();
        assert_eq!(names, ["a", "c", "d"]);
        assert_eq!(pods[2].location(), "t.csv: line 5");
    }

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
}

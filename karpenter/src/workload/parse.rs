//! Workload text into objects, one at a time as it is read: multi-document Kubernetes YAML
//! (split on `---` lines, as kubectl's YAML reader splits a stream) or an Alibaba
//! `openb_pod_list` CSV trace, one bare pod per task that did not fail. Each object goes to the
//! caller's [`Sink`] as soon as it is parsed, so a caller that refuses one (the pod cap) stops
//! the reading there: only the current document (or row) is ever held as text. Every error names
//! the file and document (or line).

use std::io::{BufRead, Read};
use std::path::Path;

use serde_json::{Value, json};

use super::manifest::{Manifest, WorkloadError};

/// Where objects go as they are parsed, in file order. An error it returns stops the reading
/// and is returned as is (e.g. [`WorkloadError::OverCap`] naming the object).
pub(super) type Sink<'a> = dyn FnMut(Manifest) -> Result<(), WorkloadError> + 'a;

/// What follows the marker when `line` starts a new document (`---` alone or followed by a
/// space or tab, e.g. `--- # web`), `None` for any other line.
fn separator(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(b"---")?;
    match rest.first() {
        None | Some(b'\n' | b'\r') => Some(&[]),
        Some(b' ' | b'\t') => Some(&rest[1..]),
        _ => None,
    }
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
    let mut out = Vec::new();
    read_yaml(source, text.as_bytes(), &mut |m| {
        out.push(m);
        Ok(())
    })?;
    Ok(out)
}

/// [`parse_yaml`] over a stream: documents are read one at a time (numbered from 1 as the
/// `---` lines split them, blank ones included) and each object goes to `sink` before the next
/// document is read.
///
/// Errors: as [`parse_yaml`]; a document that is not UTF-8; the input's read errors (see
/// [`WorkloadError::reading`]); whatever `sink` returns.
pub(super) fn read_yaml(
    source: &Path,
    mut input: impl BufRead,
    sink: &mut Sink<'_>,
) -> Result<(), WorkloadError> {
    let path = source.display().to_string();
    let mut doc = Vec::new();
    let mut line = Vec::new();
    let mut index = 1;
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| WorkloadError::reading(&path, e))?;
        if n == 0 {
            break;
        }
        if let Some(rest) = separator(&line) {
            document(source, index, &doc, sink)?;
            index += 1;
            doc.clear();
            doc.extend_from_slice(rest);
        } else {
            doc.extend_from_slice(&line);
        }
    }
    document(source, index, &doc, sink)
}

/// The objects of document `index` (its bytes in `doc`) into `sink`: none for a blank one, each
/// item of a `kind: List`, else the document itself.
fn document(
    source: &Path,
    index: usize,
    doc: &[u8],
    sink: &mut Sink<'_>,
) -> Result<(), WorkloadError> {
    let err = |message: String| WorkloadError::Document {
        path: source.display().to_string(),
        index,
        message,
    };
    let text = std::str::from_utf8(doc).map_err(|e| err(format!("not UTF-8 text: {e}")))?;
    if is_blank(text) {
        return Ok(());
    }
    let mut value: Value =
        serde_saphyr::from_str(text).map_err(|e| err(format!("invalid YAML: {e}")))?;
    let items = if value.get("kind").and_then(Value::as_str) == Some("List") {
        match value.get_mut("items").map(Value::take) {
            Some(Value::Array(items)) => items,
            _ => Vec::new(),
        }
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
        sink(m)?;
    }
    Ok(())
}

/// The columns of an `openb_pod_list` file that are read. The published variants differ: every
/// one has `name,cpu_milli,memory_mib,num_gpu,gpu_milli`; some add `gpu_spec`, `qos`,
/// `pod_phase`, `creation_time`, `deletion_time`, `scheduled_time`. The first three are
/// required; a missing (or empty) optional column is absent: no GPUs, no phase (the task is
/// kept). Columns not listed here are ignored.
const REQUIRED_COLUMNS: [&str; 3] = ["name", "cpu_milli", "memory_mib"];
/// The optional columns read (see [`REQUIRED_COLUMNS`]).
const OPTIONAL_COLUMNS: [&str; 2] = ["num_gpu", "pod_phase"];

/// Where each column read sits in a trace's header.
struct TraceColumns {
    name: usize,
    cpu_milli: usize,
    memory_mib: usize,
    num_gpu: Option<usize>,
    pod_phase: Option<usize>,
}

impl TraceColumns {
    /// The columns of `header`.
    ///
    /// Errors: a required column is missing; the message names the header as read, the
    /// missing columns and the expected ones.
    fn of(header: &csv::StringRecord) -> Result<TraceColumns, String> {
        let find = |c: &str| header.iter().position(|h| h.trim() == c);
        let missing: Vec<&str> = REQUIRED_COLUMNS
            .into_iter()
            .filter(|c| find(c).is_none())
            .collect();
        match (find("name"), find("cpu_milli"), find("memory_mib")) {
            (Some(name), Some(cpu_milli), Some(memory_mib)) => Ok(TraceColumns {
                name,
                cpu_milli,
                memory_mib,
                num_gpu: find("num_gpu"),
                pod_phase: find("pod_phase"),
            }),
            _ => Err(format!(
                "header `{}` has no column {}; a trace needs the columns {} (and may have {}; \
                 others are ignored)",
                header.iter().collect::<Vec<_>>().join(","),
                missing
                    .iter()
                    .map(|c| format!("`{c}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                REQUIRED_COLUMNS.join(", "),
                OPTIONAL_COLUMNS.join(", "),
            )),
        }
    }
}

/// Column `column` of `row` (index `at`) as a count: an integer.
///
/// Errors: the cell is empty or not an integer; the message names the column, the value and
/// what was expected (`unit`).
fn integer(row: &csv::StringRecord, at: usize, column: &str, unit: &str) -> Result<i64, String> {
    let cell = row.get(at).unwrap_or("").trim();
    cell.parse::<i64>()
        .map_err(|_| format!("column `{column}`: {cell:?} is not a whole number ({unit})"))
}

/// Column `at` of `row`, when present and not empty.
fn optional(row: &csv::StringRecord, at: Option<usize>) -> Option<&str> {
    at.and_then(|i| row.get(i))
        .map(str::trim)
        .filter(|c| !c.is_empty())
}

/// Whether a file is an Alibaba `openb_pod_list` trace (by extension, or by its header when
/// `text` is its beginning).
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
    let mut out = Vec::new();
    read_trace(source, text.as_bytes(), &mut |m| {
        out.push(m);
        Ok(())
    })?;
    Ok(out)
}

/// [`parse_trace`] over a stream: rows are read one at a time and each pod goes to `sink`
/// before the next row is read.
///
/// Errors: as [`parse_trace`]; the input's read errors (see [`WorkloadError::reading`]);
/// whatever `sink` returns.
pub(super) fn read_trace(
    source: &Path,
    input: impl Read,
    sink: &mut Sink<'_>,
) -> Result<(), WorkloadError> {
    let path = source.display().to_string();
    let csv_error = |line: usize, message: String| WorkloadError::Csv {
        path: path.clone(),
        line,
        message,
    };
    let mut reader = csv::Reader::from_reader(input);
    let header = reader
        .headers()
        .map_err(|e| row_error(&path, 1, e))?
        .clone();
    let columns = TraceColumns::of(&header).map_err(|m| csv_error(1, m))?;
    for (i, row) in reader.records().enumerate() {
        let line = i + 2;
        let row = row.map_err(|e| row_error(&path, line, e))?;
        if optional(&row, columns.pod_phase) == Some("Failed") {
            continue;
        }
        let name = optional(&row, Some(columns.name))
            .ok_or_else(|| csv_error(line, "column `name` is empty".into()))?
            .to_string();
        let cpu_milli = integer(&row, columns.cpu_milli, "cpu_milli", "millicores")
            .map_err(|m| csv_error(line, m))?;
        let memory_mib = integer(&row, columns.memory_mib, "memory_mib", "MiB")
            .map_err(|m| csv_error(line, m))?;
        let num_gpu = match columns.num_gpu {
            Some(at) if optional(&row, Some(at)).is_some() => {
                integer(&row, at, "num_gpu", "GPUs").map_err(|m| csv_error(line, m))?
            }
            _ => 0,
        };
        if cpu_milli < 0 || memory_mib < 0 || num_gpu < 0 {
            return Err(csv_error(line, "requests must not be negative".into()));
        }
        let mut requests =
            json!({"cpu": format!("{cpu_milli}m"), "memory": format!("{memory_mib}Mi")});
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
            "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "openb-task", "trace": "alibaba-openb"}},
            "spec": {"containers": [{"name": "task", "image": "public.ecr.aws/eks-distro/kubernetes/pause:3.2", "resources": resources}]},
        });
        sink(Manifest {
            object,
            source: source.to_path_buf(),
            index: line,
        })?;
    }
    Ok(())
}

/// A trace row that could not be read: the input's own failure (see
/// [`WorkloadError::reading`]), else [`WorkloadError::Csv`] with the CSV reader's message.
fn row_error(path: &str, line: usize, e: csv::Error) -> WorkloadError {
    let csv = |message: String| WorkloadError::Csv {
        path: path.to_string(),
        line,
        message,
    };
    if !matches!(e.kind(), csv::ErrorKind::Io(_)) {
        return csv(e.to_string());
    }
    match e.into_kind() {
        csv::ErrorKind::Io(io) => WorkloadError::reading(path, io),
        other => csv(format!("{other:?}")),
    }
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
        // The column and the value are named, with the unit expected.
        assert_eq!(
            bad.to_string(),
            "t.csv: line 2: column `cpu_milli`: \"x\" is not a whole number (millicores)"
        );
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
        // A required column missing (here renamed) is an error about the header: it names the
        // header as read, the missing column and the expected ones.
        let err = parse_trace(Path::new("m.csv"), "name,cpu_milli,memory\np,1,2\n")
            .expect_err("no memory_mib");
        assert_eq!(
            err.to_string(),
            "m.csv: line 1: header `name,cpu_milli,memory` has no column `memory_mib`; a trace \
             needs the columns name, cpu_milli, memory_mib (and may have num_gpu, pod_phase; \
             others are ignored)"
        );
    }

    /// An endless stream of `unit` repeated (lazily: nothing is held), counting the bytes read.
    struct Endless {
        unit: Vec<u8>,
        at: usize,
        read: u64,
    }

    impl Endless {
        fn new(unit: &str) -> Self {
            Endless {
                unit: unit.as_bytes().to_vec(),
                at: 0,
                read: 0,
            }
        }
    }

    impl Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let mut n = 0;
            while n < buf.len() {
                let take = (self.unit.len() - self.at).min(buf.len() - n);
                buf[n..n + take].copy_from_slice(&self.unit[self.at..self.at + take]);
                n += take;
                self.at = (self.at + take) % self.unit.len();
            }
            self.read += n as u64;
            Ok(n)
        }
    }

    /// A sink that keeps objects and refuses the one after the first `cap`, as the pod cap does.
    fn capped(
        cap: usize,
        kept: &mut Vec<Manifest>,
    ) -> impl FnMut(Manifest) -> Result<(), WorkloadError> + '_ {
        move |m| {
            if kept.len() == cap {
                return Err(WorkloadError::OverCap {
                    what: m.describe(),
                    pods: cap as u64 + 1,
                    cap: cap as u32,
                });
            }
            kept.push(m);
            Ok(())
        }
    }

    #[test]
    fn an_endless_yaml_stream_is_read_only_up_to_the_object_the_sink_refuses() {
        let pod = "---\napiVersion: v1\nkind: Pod\nmetadata: {generateName: p-}\nspec: {containers: [{name: c, image: pause}]}\n";
        let mut input = std::io::BufReader::new(Endless::new(pod));
        let mut kept = Vec::new();
        let err = read_yaml(
            Path::new("pods.yaml"),
            &mut input,
            &mut capped(10, &mut kept),
        )
        .expect_err("the 11th pod is refused");
        assert_eq!(
            err.to_string(),
            "pods.yaml: document 12: Pod \"p-\" brings the workload to 11 pods, over the cap of 10 (--max-pods)"
        );
        assert_eq!(kept.len(), 10);
        // Eleven documents of ~100 bytes, and at most one read buffer past them.
        let read = input.get_ref().read;
        assert!(read <= 16 * 1024, "read {read} bytes of the stream");
    }

    #[test]
    fn an_endless_trace_is_read_only_up_to_the_pod_the_sink_refuses() {
        let header = "name,cpu_milli,memory_mib,num_gpu,pod_phase\n";
        let rows =
            std::io::Cursor::new(header).chain(Endless::new("t,1,1,0,Running\nf,1,1,0,Failed\n"));
        let mut counted = CountingRead {
            inner: rows,
            read: 0,
        };
        let mut kept = Vec::new();
        let err = read_trace(Path::new("t.csv"), &mut counted, &mut capped(10, &mut kept))
            .expect_err("the 11th task is refused");
        // Rows alternate kept and Failed: the 11th kept task is on line 2 + 2 * 10.
        assert_eq!(
            err.to_string(),
            "t.csv: line 22: Pod \"t\" brings the workload to 11 pods, over the cap of 10 (--max-pods)"
        );
        assert!(
            counted.read <= 16 * 1024,
            "read {} bytes of the trace",
            counted.read
        );
    }

    /// Counts the bytes read through it.
    struct CountingRead<R> {
        inner: R,
        read: u64,
    }

    impl<R: Read> Read for CountingRead<R> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.read += n as u64;
            Ok(n)
        }
    }

    #[test]
    fn documents_are_numbered_by_separator_lines_and_a_marker_line_may_hold_content() {
        let text = "# leading comment\n--- # first\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n\
            --- {apiVersion: v1, kind: ConfigMap, metadata: {name: b}}\n---\n---\t\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n";
        let ms = parse_yaml(Path::new("s.yaml"), text).expect("parses");
        let got: Vec<(&str, usize)> = ms.iter().map(|m| (m.name(), m.index)).collect();
        assert_eq!(got, [("a", 2), ("b", 3), ("c", 5)]);
        let bad = read_yaml(
            Path::new("b.yaml"),
            &b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: \xff\n"[..],
            &mut |_| Ok(()),
        )
        .expect_err("not UTF-8");
        assert!(
            bad.to_string()
                .starts_with("b.yaml: document 2: not UTF-8 text"),
            "{bad}"
        );
    }
}

//! Renders `meta.k8s.io/v1` Table responses so `kubectl get` prints the columns kube-apiserver would.
//!
//! Built-in kinds get the column sets of kube-apiserver's printers (Kubernetes 1.32); custom resources
//! get their CRD's `additionalPrinterColumns`. Everything here is pure: the caller hands in the objects,
//! the list metadata and the clock.

use std::collections::BTreeSet;
use std::str::FromStr;

use crds::duration::human_duration;
use jiff::Timestamp;
use jsonpath_rust::parser::{model::JpQuery, parse_json_path};
use jsonpath_rust::query::js_path_process;
use serde_json::{Map, Value, json};

/// One printer column as a CRD declares it (`apiextensions.k8s.io/v1` `additionalPrinterColumns`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrinterColumn {
    /// Column header, e.g. `Ready`.
    pub name: String,
    /// Cell type: `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    /// Format hint passed through to the column definition (may be empty).
    pub format: String,
    /// Column description; empty means the server generates one from the path.
    pub description: String,
    /// 0 shows in the default view, anything higher only with `-o wide`.
    pub priority: i32,
    /// kubectl-style JSONPath such as `.status.conditions[?(@.type=="Ready")].status`.
    pub json_path: String,
}

impl PrinterColumn {
    /// Reads one entry of a CRD version's `additionalPrinterColumns` array; missing fields are empty.
    pub fn from_crd(column: &Value) -> Self {
        Self {
            name: text(column, "name").to_owned(),
            type_: text(column, "type").to_owned(),
            format: text(column, "format").to_owned(),
            description: text(column, "description").to_owned(),
            priority: i32::try_from(int(column, "priority")).unwrap_or(0),
            json_path: text(column, "jsonPath").to_owned(),
        }
    }

    /// Checks that the column's JSONPath can be evaluated, as CRD validation would on create.
    pub fn validate(&self) -> Result<(), TableError> {
        compile_path(&self.json_path).map(drop)
    }
}

/// Which columns a resource is printed with.
#[derive(Debug, Clone, Copy)]
pub enum Columns<'a> {
    /// A built-in kind, named by API group (`""` or `"core"` for the core group) and kind.
    BuiltIn {
        /// API group, e.g. `apps`.
        group: &'a str,
        /// Kind, e.g. `Deployment`.
        kind: &'a str,
    },
    /// A custom resource, printed with its CRD's columns for the served version.
    Custom(&'a [PrinterColumn]),
}

/// How much of each object the rows carry (query parameter `includeObject`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IncludeObject {
    /// Rows carry no object.
    None,
    /// Rows carry a `PartialObjectMetadata` with the object's metadata (the default).
    #[default]
    Metadata,
    /// Rows carry the whole object.
    Object,
}

impl FromStr for IncludeObject {
    type Err = TableError;

    /// Parses the query parameter value; empty means the default, `Metadata`.
    fn from_str(s: &str) -> Result<Self, TableError> {
        match s {
            "None" => Ok(Self::None),
            "" | "Metadata" => Ok(Self::Metadata),
            "Object" => Ok(Self::Object),
            other => Err(TableError::IncludeObject(other.to_owned())),
        }
    }
}

/// Errors from request parameters or printer-column definitions.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// `includeObject` was not `None`, `Metadata` or `Object` (the server answers 400).
    #[error("unrecognized includeObject value: {0:?}")]
    IncludeObject(String),
    /// A printer-column JSONPath could not be translated or parsed.
    #[error("unrecognized column definition {path:?}: {reason}")]
    JsonPath {
        /// The kubectl-style path as declared.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

/// Renders a Table for `objects` (full JSON objects of one resource type).
///
/// `list_meta` (`resourceVersion`, `continue`, ...) becomes the Table's metadata; `now` drives every
/// age cell. Built-in tables always carry the wide (priority 1) cells; kubectl hides them unless `-o wide`.
pub fn render(
    columns: &Columns,
    objects: &[&Value],
    include: IncludeObject,
    list_meta: Value,
    now: Timestamp,
) -> Value {
    let (defs, cells): (Vec<Value>, Vec<Vec<Value>>) = match *columns {
        Columns::BuiltIn { group, kind } => {
            let (spec, cells) = printer(group, kind);
            (
                definitions(spec),
                objects.iter().map(|o| cells(o, now)).collect(),
            )
        }
        Columns::Custom(declared) => {
            let compiled = compile_columns(declared);
            let mut defs = definitions("Name");
            defs.extend(compiled.iter().map(|c| c.definition.clone()));
            (
                defs,
                objects
                    .iter()
                    .map(|o| custom_cells(&compiled, o, now))
                    .collect(),
            )
        }
    };
    let is_pod = matches!(
        *columns,
        Columns::BuiltIn {
            group: "" | "core",
            kind: "Pod"
        }
    );
    let rows: Vec<Value> = objects
        .iter()
        .zip(cells)
        .map(|(object, cells)| {
            let mut row = Map::new();
            row.insert("cells".into(), Value::Array(cells));
            if let Some(conditions) = is_pod.then(|| pod_conditions(object)).flatten() {
                row.insert("conditions".into(), conditions);
            }
            row.insert("object".into(), row_object(object, include));
            Value::Object(row)
        })
        .collect();
    let metadata = if list_meta.is_object() {
        list_meta
    } else {
        json!({})
    };
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": defs,
        "rows": rows,
    })
}

/// Translates a kubectl-style JSONPath (no leading `$`, `\.` escaping dots inside keys, optional
/// `{...}`) into RFC 9535 syntax for jsonpath-rust, e.g. `.metadata.labels.node\.kubernetes\.io/zone`
/// becomes `$.metadata.labels['node.kubernetes.io/zone']`. Bracket expressions pass through as written.
pub fn kubectl_json_path(path: &str) -> Result<String, TableError> {
    let fail = |reason: &str| TableError::JsonPath {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let mut p = path.trim();
    if let Some(inner) = p.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
        p = inner.trim();
    }
    let chars: Vec<char> = p.strip_prefix('$').unwrap_or(p).chars().collect();
    let mut out = String::from("$");
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '[' {
            let end = bracket_end(&chars, i).ok_or_else(|| fail("unbalanced '['"))?;
            out.extend(&chars[i..=end]);
            i = end + 1;
            continue;
        }
        let descent = chars[i] == '.' && chars.get(i + 1) == Some(&'.');
        if descent {
            out.push_str("..");
            i += 2;
        } else if chars[i] == '.' {
            i += 1;
        }
        let mut name = String::new();
        while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
            if chars[i] == '\\' {
                i += 1;
                name.push(*chars.get(i).ok_or_else(|| fail("dangling '\\'"))?);
            } else {
                name.push(chars[i]);
            }
            i += 1;
        }
        let dot = if descent { "" } else { "." };
        let simple = name
            .chars()
            .enumerate()
            .all(|(n, c)| c == '_' || c.is_ascii_alphabetic() || (n > 0 && c.is_ascii_digit()));
        if name == "*" || (!name.is_empty() && simple) {
            out.push_str(&format!("{dot}{name}"));
        } else if !name.is_empty() {
            out.push_str(&format!(
                "['{}']",
                name.replace('\\', "\\\\").replace('\'', "\\'")
            ));
        } else if descent {
            return Err(fail("'..' must be followed by a name or '['"));
        }
    }
    Ok(out)
}

/// Index of the `]` closing the bracket that opens at `start`, skipping quoted text and nesting.
fn bracket_end(chars: &[char], start: usize) -> Option<usize> {
    let (mut depth, mut quote, mut j) = (0usize, None, start);
    while j < chars.len() {
        match (quote, chars[j]) {
            (Some(_), '\\') => j += 1,
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, c @ ('\'' | '"')) => quote = Some(c),
            (None, '[') => depth += 1,
            (None, ']') => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            (None, _) => {}
        }
        j += 1;
    }
    None
}

fn compile_path(path: &str) -> Result<JpQuery, TableError> {
    let translated = kubectl_json_path(path)?;
    parse_json_path(&translated).map_err(|e| TableError::JsonPath {
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

struct CompiledColumn {
    definition: Value,
    type_: String,
    query: JpQuery,
}

/// Compiles CRD columns the way the server does: no columns means a single `Age` date column, and an
/// unparsable path ends the list there (the server logs it and keeps the columns before it).
fn compile_columns(declared: &[PrinterColumn]) -> Vec<CompiledColumn> {
    let default_age = [PrinterColumn {
        name: "Age".into(),
        type_: "date".into(),
        description: AGE_DESC.into(),
        json_path: ".metadata.creationTimestamp".into(),
        ..PrinterColumn::default()
    }];
    let declared = if declared.is_empty() {
        &default_age[..]
    } else {
        declared
    };
    let mut compiled = Vec::new();
    for column in declared {
        let Ok(query) = compile_path(&column.json_path) else {
            break;
        };
        let description = match column.description.as_str() {
            "" => format!(
                "Custom resource definition column (in JSONPath format): {}",
                column.json_path
            ),
            given => given.to_owned(),
        };
        let definition = definition(
            &column.name,
            &column.type_,
            &column.format,
            &description,
            column.priority,
        );
        compiled.push(CompiledColumn {
            definition,
            type_: column.type_.clone(),
            query,
        });
    }
    compiled
}

/// One row of a custom resource: the name, then the first JSONPath match of each column converted to
/// the column's type (`null` when nothing matches or the type does not fit, like the server).
fn custom_cells(columns: &[CompiledColumn], object: &Value, now: Timestamp) -> Vec<Value> {
    let mut cells = vec![Value::from(text(object, "metadata.name"))];
    for column in columns {
        let found = js_path_process(&column.query, object)
            .ok()
            .and_then(|v| v.into_iter().next());
        let Some(value) = found.map(|r| r.val()) else {
            cells.push(Value::Null);
            continue;
        };
        cells.push(match (column.type_.as_str(), value) {
            ("string", Value::String(s)) => Value::from(s.as_str()),
            ("string", Value::Null) => Value::from("<no value>"),
            ("string", Value::Number(n)) => Value::from(
                n.as_i64()
                    .map_or_else(|| n.as_f64().unwrap_or(0.0).to_string(), |i| i.to_string()),
            ),
            ("string", Value::Bool(b)) => Value::from(b.to_string()),
            ("string", other) => Value::from(other.to_string()),
            ("integer", Value::Number(n)) => n
                .as_i64()
                .or(n.as_f64().map(|f| f as i64))
                .map_or(Value::Null, Value::from),
            ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, Value::from),
            ("boolean", Value::Bool(b)) => Value::Bool(*b),
            ("date", Value::String(s)) => Value::from(match s.as_str() {
                "" | "null" => "<unknown>".to_owned(),
                s => s
                    .parse::<Timestamp>()
                    .map_or_else(|_| "<invalid>".to_owned(), |t| since(Some(t), now)),
            }),
            _ => Value::Null,
        });
    }
    cells
}

fn definition(name: &str, ty: &str, format: &str, description: &str, priority: i32) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": description, "priority": priority})
}

fn row_object(object: &Value, include: IncludeObject) -> Value {
    match include {
        IncludeObject::None => Value::Null,
        IncludeObject::Object => object.clone(),
        IncludeObject::Metadata => json!({
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
        }),
    }
}

// ---------------------------------------------------------------- built-in column sets

// Column sets, comma-separated: `#` marks integer columns, `@` date columns and `+` columns that only
// `-o wide` shows (priority 1). Types and priorities are kube-apiserver's; descriptions are left empty
// except for Name and Age.
const POD: &str = "Name,Ready,Status,Restarts,Age,+IP,+Node,+Nominated Node,+Readiness Gates";
const NODE: &str = "Name,Status,Roles,Age,Version,\
    +Internal-IP,+External-IP,+OS-Image,+Kernel-Version,+Container-Runtime";
const EVENT: &str =
    "Last Seen,Type,Reason,Object,+Subobject,+Source,Message,+First Seen,+Count,+Name";
const SERVICE: &str = "Name,Type,Cluster-IP,External-IP,Port(s),Age,+Selector";
const DEPLOYMENT: &str = "Name,Ready,Up-to-date,Available,Age,+Containers,+Images,+Selector";
const REPLICA_SET: &str = "Name,#Desired,#Current,#Ready,Age,+Containers,+Images,+Selector";
const DAEMON_SET: &str = "Name,#Desired,#Current,#Ready,#Up-to-date,#Available,Node Selector,Age,\
    +Containers,+Images,+Selector";
const STATEFUL_SET: &str = "Name,Ready,Age,+Containers,+Images";
const JOB: &str = "Name,Status,Completions,Duration,Age,+Containers,+Images,+Selector";
const PDB: &str = "Name,Min Available,Max Unavailable,#Allowed Disruptions,Age";
const NAME_DESC: &str = "Name of the object, unique within its namespace.";
const AGE_DESC: &str = "Time since the object was created (metadata.creationTimestamp).";

/// Column definitions for a column-set string.
fn definitions(spec: &'static str) -> Vec<Value> {
    let parse = |column: &'static str| {
        let (priority, column) = column.strip_prefix('+').map_or((0, column), |c| (1, c));
        let (ty, name) = match (column.strip_prefix('#'), column.strip_prefix('@')) {
            (Some(name), _) => ("integer", name),
            (_, Some(name)) => ("date", name),
            _ => ("string", column),
        };
        let (format, desc) = match name {
            "Name" => ("name", NAME_DESC),
            "Age" => ("", AGE_DESC),
            _ => ("", ""),
        };
        definition(name, ty, format, desc, priority)
    };
    spec.split(',').map(|c| parse(c.trim())).collect()
}

type CellFn = fn(&Value, Timestamp) -> Vec<Value>;

macro_rules! cells {
    ($($cell:expr),* $(,)?) => { vec![$(Value::from($cell)),*] };
}

mod storage;

/// Column set and row function of a built-in kind; unknown kinds get Name and Age.
fn printer(group: &str, kind: &str) -> (&'static str, CellFn) {
    match (if group == "core" { "" } else { group }, kind) {
        ("", "Pod") => (POD, pod_cells),
        ("", "Node") => (NODE, node_cells),
        ("", "Event") => (EVENT, event_cells),
        ("", "Service") => (SERVICE, service_cells),
        ("", "Namespace") => ("Name,Status,Age", |o, now| {
            cells![name(o), text(o, "status.phase"), age(o, now)]
        }),
        ("", "ServiceAccount") => ("Name,Secrets,Age", |o, now| {
            cells![name(o), len(o, "secrets"), age(o, now)]
        }),
        ("", "ConfigMap") => ("Name,Data,Age", |o, now| {
            cells![name(o), len(o, "data") + len(o, "binaryData"), age(o, now)]
        }),
        ("", "Secret") => ("Name,Type,Data,Age", |o, now| {
            cells![name(o), text(o, "type"), len(o, "data"), age(o, now)]
        }),
        ("", "Endpoints") => ("Name,Endpoints,Age", |o, now| {
            cells![name(o), format_endpoints(o), age(o, now)]
        }),
        ("apps", "Deployment") => (DEPLOYMENT, deployment_cells),
        ("apps", "ReplicaSet") => (REPLICA_SET, replica_set_cells),
        ("apps", "DaemonSet") => (DAEMON_SET, daemon_set_cells),
        ("apps", "StatefulSet") => (STATEFUL_SET, |o, now| {
            let ready = format!("{}/{}", int(o, "status.readyReplicas"), replicas(o));
            with_template(cells![name(o), ready, age(o, now)], o, None)
        }),
        ("", "PersistentVolume") => (storage::PERSISTENT_VOLUME, storage::persistent_volume),
        ("", "PersistentVolumeClaim") => (
            storage::PERSISTENT_VOLUME_CLAIM,
            storage::persistent_volume_claim,
        ),
        ("storage.k8s.io", "StorageClass") => (storage::STORAGE_CLASS, storage::storage_class),
        ("storage.k8s.io", "CSINode") => (storage::CSI_NODE, storage::csi_node),
        ("storage.k8s.io", "VolumeAttachment") => {
            (storage::VOLUME_ATTACHMENT, storage::volume_attachment)
        }
        ("batch", "Job") => (JOB, job_cells),
        ("policy", "PodDisruptionBudget") => (PDB, pdb_cells),
        ("coordination.k8s.io", "Lease") => ("Name,Holder,Age", |o, now| {
            cells![name(o), text(o, "spec.holderIdentity"), age(o, now)]
        }),
        // kube-apiserver's generic convertor: the creation time as RFC 3339 in UTC.
        ("apiextensions.k8s.io", "CustomResourceDefinition")
        | ("rbac.authorization.k8s.io", "Role" | "ClusterRole") => ("Name,@Created At", |o, _| {
            let created = time(o, "metadata.creationTimestamp")
                .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
            cells![
                name(o),
                created.unwrap_or_else(|| "0001-01-01T00:00:00Z".into())
            ]
        }),
        _ => ("Name,Age", |o, now| cells![name(o), age(o, now)]),
    }
}

fn pod_cells(pod: &Value, now: Timestamp) -> Vec<Value> {
    let (spec, status) = (get(pod, "spec"), get(pod, "status"));
    let phase = text(status, "phase");
    let mut reason = or(text(status, "reason"), phase).to_owned();
    let conditions = items(status, "conditions");
    let gated =
        |c: &Value| text(c, "type") == "PodScheduled" && text(c, "reason") == "SchedulingGated";
    if conditions.iter().any(gated) {
        reason = "SchedulingGated".into();
    }
    // Sidecars are init containers with restartPolicy Always; they count as regular containers.
    let init_specs = items(spec, "initContainers");
    let sidecar = |c: &Value| text(c, "restartPolicy") == "Always";
    let is_sidecar = |name: &str| {
        init_specs
            .iter()
            .any(|c| text(c, "name") == name && sidecar(c))
    };
    let total = items(spec, "containers").len() + init_specs.iter().filter(|c| sidecar(c)).count();
    let (mut ready, mut restarts, mut sidecar_restarts) = (0, 0, 0);
    let (mut last_restart, mut last_sidecar_restart) = (None, None);
    let mut initializing = false;
    for (i, cs) in items(status, "initContainerStatuses").iter().enumerate() {
        let finished = time(cs, "lastState.terminated.finishedAt");
        restarts += int(cs, "restartCount");
        last_restart = last_restart.max(finished);
        let sidecar = is_sidecar(text(cs, "name"));
        if sidecar {
            sidecar_restarts += int(cs, "restartCount");
            last_sidecar_restart = last_sidecar_restart.max(finished);
        }
        let terminated = get(cs, "state.terminated");
        let waiting = text(cs, "state.waiting.reason");
        if terminated.is_object() && int(terminated, "exitCode") == 0 {
            continue;
        }
        if sidecar && flag(cs, "started") {
            ready += usize::from(flag(cs, "ready"));
            continue;
        }
        reason = if terminated.is_object() {
            format!("Init:{}", exit_reason(terminated))
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{}", init_specs.len())
        };
        initializing = true;
        break;
    }
    if !initializing || condition_true(conditions, "Initialized") {
        (restarts, last_restart) = (sidecar_restarts, last_sidecar_restart);
        let mut has_running = false;
        for cs in items(status, "containerStatuses").iter().rev() {
            restarts += int(cs, "restartCount");
            last_restart = last_restart.max(time(cs, "lastState.terminated.finishedAt"));
            let terminated = get(cs, "state.terminated");
            if !text(cs, "state.waiting.reason").is_empty() {
                reason = text(cs, "state.waiting.reason").to_owned();
            } else if terminated.is_object() {
                reason = exit_reason(terminated);
            } else if flag(cs, "ready") && get(cs, "state.running").is_object() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            let running = conditions
                .iter()
                .any(|c| text(c, "type") == "Ready" && text(c, "status") == "True");
            reason = if running { "Running" } else { "NotReady" }.into();
        }
    }
    if !text(pod, "metadata.deletionTimestamp").is_empty() {
        if text(status, "reason") == "NodeLost" {
            reason = "Unknown".into();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".into();
        }
    }
    let restarts = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", since(Some(t), now)),
        _ => restarts.to_string(),
    };
    let gates = items(spec, "readinessGates");
    let met = gates
        .iter()
        .filter(|g| condition_true(conditions, text(g, "conditionType")));
    let gates = match gates.len() {
        0 => "<none>".to_owned(),
        n => format!("{}/{n}", met.count()),
    };
    cells![
        name(pod),
        format!("{ready}/{total}"),
        reason,
        restarts,
        age(pod, now),
        or(
            or(text(status, "podIPs.0.ip"), text(status, "podIP")),
            "<none>"
        ),
        or(text(spec, "nodeName"), "<none>"),
        or(text(status, "nominatedNodeName"), "<none>"),
        gates,
    ]
}

/// `reason` of a terminated container state, else `Signal:N` or `ExitCode:N`.
fn exit_reason(terminated: &Value) -> String {
    match (text(terminated, "reason"), int(terminated, "signal")) {
        ("", 0) => format!("ExitCode:{}", int(terminated, "exitCode")),
        ("", signal) => format!("Signal:{signal}"),
        (reason, _) => reason.to_owned(),
    }
}

/// Succeeded and Failed pods carry a `Completed` row condition.
fn pod_conditions(pod: &Value) -> Option<Value> {
    let (reason, message) = match text(pod, "status.phase") {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

fn node_cells(node: &Value, now: Timestamp) -> Vec<Value> {
    let status = get(node, "status");
    let conditions = items(status, "conditions");
    let ready = conditions.iter().rev().find(|c| text(c, "type") == "Ready");
    let mut state = match ready.map(|c| text(c, "status")) {
        Some("True") => "Ready".to_owned(),
        Some(_) => "NotReady".to_owned(),
        None => "Unknown".to_owned(),
    };
    if flag(node, "spec.unschedulable") {
        state.push_str(",SchedulingDisabled");
    }
    let labels = get(node, "metadata.labels")
        .as_object()
        .into_iter()
        .flatten();
    let roles: BTreeSet<&str> = labels
        .filter_map(
            |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) => Some(role),
                None if key == "kubernetes.io/role" => value.as_str(),
                None => None,
            },
        )
        .filter(|role| !role.is_empty())
        .collect();
    let address = |kind: &str| {
        let found = items(status, "addresses")
            .iter()
            .find(|a| text(a, "type") == kind);
        found.map_or("<none>", |a| text(a, "address"))
    };
    let info = |key: &str| or(text(status, &format!("nodeInfo.{key}")), "<unknown>");
    cells![
        name(node),
        state,
        or(&roles.into_iter().collect::<Vec<_>>().join(","), "<none>"),
        age(node, now),
        text(status, "nodeInfo.kubeletVersion"),
        address("InternalIP"),
        address("ExternalIP"),
        info("osImage"),
        info("kernelVersion"),
        info("containerRuntimeVersion"),
    ]
}

fn event_cells(event: &Value, now: Timestamp) -> Vec<Value> {
    let first = since(
        time(event, "firstTimestamp").or(time(event, "eventTime")),
        now,
    );
    let mut last =
        time(event, "lastTimestamp").map_or_else(|| first.clone(), |t| since(Some(t), now));
    let mut count = int(event, "count");
    if get(event, "series").is_object() {
        last = since(time(event, "series.lastObservedTime"), now);
        count = int(event, "series.count");
    } else if count == 0 {
        count = 1;
    }
    let kind = text(event, "involvedObject.kind").to_lowercase();
    let target = match text(event, "involvedObject.name") {
        "" => kind,
        object => format!("{kind}/{object}"),
    };
    let component = or(
        text(event, "source.component"),
        text(event, "reportingComponent"),
    );
    let source = match or(text(event, "source.host"), text(event, "reportingInstance")) {
        "" => component.to_owned(),
        host => format!("{component}, {host}"),
    };
    cells![
        last,
        text(event, "type"),
        text(event, "reason"),
        target,
        text(event, "involvedObject.fieldPath"),
        source,
        text(event, "message").trim(),
        first,
        count,
        name(event),
    ]
}

fn service_cells(svc: &Value, now: Timestamp) -> Vec<Value> {
    let spec = get(svc, "spec");
    let svc_type = or(text(spec, "type"), "ClusterIP");
    let external_ips: Vec<&str> = items(spec, "externalIPs")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let external = match svc_type {
        "ClusterIP" | "NodePort" => or(&external_ips.join(","), "<none>").to_owned(),
        "LoadBalancer" => {
            let ingress = items(svc, "status.loadBalancer.ingress").iter();
            let ingress = ingress.map(|i| or(text(i, "ip"), text(i, "hostname")));
            let mut all: Vec<&str> = ingress
                .filter(|s| !s.is_empty())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            all.extend(&external_ips);
            or(&all.join(","), "<pending>").to_owned()
        }
        "ExternalName" => text(spec, "externalName").to_owned(),
        _ => "<unknown>".to_owned(),
    };
    let ports: Vec<String> = items(spec, "ports")
        .iter()
        .map(|p| {
            let (port, protocol) = (int(p, "port"), or(text(p, "protocol"), "TCP"));
            match int(p, "nodePort") {
                0 => format!("{port}/{protocol}"),
                node_port => format!("{port}:{node_port}/{protocol}"),
            }
        })
        .collect();
    cells![
        name(svc),
        svc_type,
        or(
            or(text(spec, "clusterIPs.0"), text(spec, "clusterIP")),
            "<none>"
        ),
        external,
        or(&ports.join(","), "<none>"),
        age(svc, now),
        format_labels(get(spec, "selector")),
    ]
}

/// Up to three `ip:port` endpoints, then `+ N more...`.
fn format_endpoints(endpoints: &Value) -> String {
    let subsets = items(endpoints, "subsets");
    if subsets.is_empty() {
        return "<none>".into();
    }
    let (mut shown, mut total) = (Vec::new(), 0);
    for subset in subsets {
        let addresses = items(subset, "addresses");
        let ports: Vec<Option<i64>> = match items(subset, "ports") {
            [] => vec![None],
            ports => ports.iter().map(|p| Some(int(p, "port"))).collect(),
        };
        for port in ports {
            total += addresses.len();
            for address in addresses.iter().take(3usize.saturating_sub(shown.len())) {
                let ip = text(address, "ip");
                shown.push(match port {
                    None => ip.to_owned(),
                    Some(port) if ip.contains(':') => format!("[{ip}]:{port}"),
                    Some(port) => format!("{ip}:{port}"),
                });
            }
        }
    }
    match total.saturating_sub(3) {
        0 => shown.join(","),
        more => format!("{} + {more} more...", shown.join(",")),
    }
}

fn deployment_cells(d: &Value, now: Timestamp) -> Vec<Value> {
    let cells = cells![
        name(d),
        format!("{}/{}", int(d, "status.readyReplicas"), replicas(d)),
        int(d, "status.updatedReplicas"),
        int(d, "status.availableReplicas"),
        age(d, now),
    ];
    let selector = label_selector(get(d, "spec.selector"));
    with_template(
        cells,
        d,
        Some(selector.unwrap_or_else(|| "<invalid>".into())),
    )
}

fn replica_set_cells(rs: &Value, now: Timestamp) -> Vec<Value> {
    let status = get(rs, "status");
    let cells = cells![
        name(rs),
        replicas(rs),
        int(status, "replicas"),
        int(status, "readyReplicas"),
        age(rs, now),
    ];
    with_template(
        cells,
        rs,
        Some(format_label_selector(get(rs, "spec.selector"))),
    )
}

fn daemon_set_cells(ds: &Value, now: Timestamp) -> Vec<Value> {
    let status = |key: &str| int(ds, &format!("status.{key}"));
    let cells = cells![
        name(ds),
        status("desiredNumberScheduled"),
        status("currentNumberScheduled"),
        status("numberReady"),
        status("updatedNumberScheduled"),
        status("numberAvailable"),
        format_labels(get(ds, "spec.template.spec.nodeSelector")),
        age(ds, now),
    ];
    with_template(
        cells,
        ds,
        Some(format_label_selector(get(ds, "spec.selector"))),
    )
}

fn job_cells(job: &Value, now: Timestamp) -> Vec<Value> {
    let (spec, status) = (get(job, "spec"), get(job, "status"));
    let succeeded = int(status, "succeeded");
    let completions = match (get(spec, "completions").as_i64(), int(spec, "parallelism")) {
        (Some(n), _) => format!("{succeeded}/{n}"),
        (None, p) if p > 1 => format!("{succeeded}/1 of {p}"),
        (None, _) => format!("{succeeded}/1"),
    };
    let end = time(status, "completionTime").unwrap_or(now);
    let duration = time(status, "startTime").map(|start| human_duration(end.duration_since(start)));
    let conditions = items(status, "conditions");
    let state = match () {
        _ if condition_true(conditions, "Complete") => "Complete",
        _ if condition_true(conditions, "Failed") => "Failed",
        _ if !text(job, "metadata.deletionTimestamp").is_empty() => "Terminating",
        _ if condition_true(conditions, "Suspended") => "Suspended",
        _ if condition_true(conditions, "FailureTarget") => "FailureTarget",
        _ => "Running",
    };
    let cells = cells![
        name(job),
        state,
        completions,
        duration.unwrap_or_default(),
        age(job, now)
    ];
    with_template(
        cells,
        job,
        Some(format_label_selector(get(spec, "selector"))),
    )
}

fn pdb_cells(pdb: &Value, now: Timestamp) -> Vec<Value> {
    let int_or_string = |key: &str| match get(pdb, &format!("spec.{key}")) {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => "N/A".to_owned(),
    };
    cells![
        name(pdb),
        int_or_string("minAvailable"),
        int_or_string("maxUnavailable"),
        int(pdb, "status.disruptionsAllowed"),
        age(pdb, now),
    ]
}

// ---------------------------------------------------------------- helpers

static NULL: Value = Value::Null;

/// The value at `path` (object keys, or array indices written as numbers), or `null`.
fn get<'a>(value: &'a Value, path: &str) -> &'a Value {
    let step = |v: &'a Value, key: &str| match v {
        Value::Array(a) => key.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => v.get(key),
    };
    path.split('.').try_fold(value, step).unwrap_or(&NULL)
}

fn text<'a>(value: &'a Value, path: &str) -> &'a str {
    get(value, path).as_str().unwrap_or("")
}

fn int(value: &Value, path: &str) -> i64 {
    let v = get(value, path);
    v.as_i64()
        .or_else(|| v.as_f64().map(|f| f as i64))
        .unwrap_or(0)
}

fn items<'a>(value: &'a Value, path: &str) -> &'a [Value] {
    get(value, path).as_array().map_or(&[], Vec::as_slice)
}

/// Whether the dotted `path` holds `true`.
fn flag(value: &Value, path: &str) -> bool {
    get(value, path).as_bool() == Some(true)
}

/// Number of entries of a map or list field.
fn len(value: &Value, key: &str) -> usize {
    value
        .get(key)
        .and_then(|v| v.as_object().map(Map::len).or(v.as_array().map(Vec::len)))
        .unwrap_or(0)
}

/// Whether the first condition of type `kind` has status True.
fn condition_true(conditions: &[Value], kind: &str) -> bool {
    let found = conditions.iter().find(|c| text(c, "type") == kind);
    found.is_some_and(|c| text(c, "status") == "True")
}

fn or<'a>(s: &'a str, fallback: &'a str) -> &'a str {
    if s.is_empty() { fallback } else { s }
}

fn time(value: &Value, path: &str) -> Option<Timestamp> {
    text(value, path).parse().ok()
}

fn since(t: Option<Timestamp>, now: Timestamp) -> String {
    t.map_or_else(
        || "<unknown>".into(),
        |t| human_duration(now.duration_since(t)),
    )
}

fn name(object: &Value) -> &str {
    text(object, "metadata.name")
}

fn age(object: &Value, now: Timestamp) -> String {
    since(time(object, "metadata.creationTimestamp"), now)
}

/// `spec.replicas`, which the API server defaults to 1.
fn replicas(object: &Value) -> i64 {
    get(object, "spec.replicas").as_i64().unwrap_or(1)
}

/// Appends the wide Containers and Images cells of `spec.template`, then the selector if given.
fn with_template(mut cells: Vec<Value>, object: &Value, selector: Option<String>) -> Vec<Value> {
    let list = items(object, "spec.template.spec.containers");
    for key in ["name", "image"] {
        cells.push(
            list.iter()
                .map(|c| text(c, key))
                .collect::<Vec<_>>()
                .join(",")
                .into(),
        );
    }
    cells.extend(selector.map(Value::from));
    cells
}

/// `k=v` pairs sorted by key, or `<none>`.
fn format_labels(labels: &Value) -> String {
    let pairs = labels.as_object().into_iter().flatten();
    let mut pairs: Vec<String> = pairs
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    pairs.sort();
    or(&pairs.join(","), "<none>").to_owned()
}

/// A LabelSelector in selector syntax (`app=web,tier in (a,b),!legacy`) sorted by key; `None` if invalid.
fn label_selector(selector: &Value) -> Option<String> {
    let labels = get(selector, "matchLabels")
        .as_object()
        .into_iter()
        .flatten();
    let mut requirements: Vec<(&str, String)> = labels
        .map(|(k, v)| {
            (
                k.as_str(),
                format!("{k}={}", v.as_str().unwrap_or_default()),
            )
        })
        .collect();
    for expression in items(selector, "matchExpressions") {
        let key = text(expression, "key");
        let mut values: Vec<&str> = items(expression, "values")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let rendered = match text(expression, "operator") {
            "In" | "NotIn" if values.is_empty() => return None,
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => return None,
        };
        requirements.push((key, rendered));
    }
    requirements.sort_by_key(|r| r.0);
    Some(
        requirements
            .into_iter()
            .map(|r| r.1)
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// Like [`label_selector`] but `<none>` when empty and `<error>` when invalid.
fn format_label_selector(selector: &Value) -> String {
    label_selector(selector).map_or_else(|| "<error>".into(), |s| or(&s, "<none>").to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2025-06-01T12:00:00Z".parse().expect("valid timestamp")
    }

    /// RFC 3339 time `secs` seconds before [`now`].
    fn ago(secs: i64) -> String {
        (now() - jiff::SignedDuration::from_secs(secs)).to_string()
    }

    fn table(columns: Columns, objects: &[Value]) -> Value {
        let refs: Vec<&Value> = objects.iter().collect();
        render(&columns, &refs, IncludeObject::Metadata, json!({}), now())
    }

    fn built_in(group: &str, kind: &str, objects: &[Value]) -> Value {
        table(Columns::BuiltIn { group, kind }, objects)
    }

    /// Parses the expected cells, written as a JSON array.
    fn parse(expected: &str) -> Vec<Value> {
        serde_json::from_str(expected).expect("expected cells are JSON")
    }

    /// Asserts the first cells of row `row`.
    fn assert_row(t: &Value, row: usize, expected: &str) {
        let want = parse(expected);
        let cells = t["rows"][row]["cells"]
            .as_array()
            .map(|c| &c[..want.len().min(c.len())]);
        assert_eq!(cells, Some(&want[..]), "row {row}");
    }

    /// Renders one built-in object and asserts its first cells.
    fn check(group: &str, kind: &str, object: Value, expected: &str) {
        assert_row(&built_in(group, kind, &[object]), 0, expected);
    }

    fn headers(t: &Value) -> Vec<&str> {
        let defs = t["columnDefinitions"].as_array().into_iter().flatten();
        defs.map(|c| c["name"].as_str().unwrap_or_default())
            .collect()
    }

    fn running_pod() -> Value {
        json!({
            "metadata": {"name": "web-7d4b9c", "namespace": "default", "creationTimestamp": ago(4 * 3600 + 600)},
            "spec": {"nodeName": "node-a", "containers": [{"name": "app"}, {"name": "proxy"}]},
            "status": {
                "phase": "Running", "podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.7"}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {"name": "app", "ready": true, "restartCount": 3, "state": {"running": {}},
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(300)}}},
                    {"name": "proxy", "ready": true, "restartCount": 0, "state": {"running": {}}}
                ]
            }
        })
    }

    fn pending_pod() -> Value {
        json!({"metadata": {"name": "batch-1", "creationTimestamp": ago(95)},
               "spec": {"containers": [{"name": "main"}]}, "status": {"phase": "Pending"}})
    }

    fn terminating_pod() -> Value {
        let mut pod = running_pod();
        pod["metadata"]["name"] = json!("old-1");
        pod["metadata"]["deletionTimestamp"] = json!(ago(10));
        pod
    }

    #[test]
    fn pods_show_ready_status_restarts_and_age() {
        let t = built_in(
            "",
            "Pod",
            &[running_pod(), pending_pod(), terminating_pod()],
        );
        let wide = ["IP", "Node", "Nominated Node", "Readiness Gates"];
        assert_eq!(
            headers(&t)[..5],
            ["Name", "Ready", "Status", "Restarts", "Age"]
        );
        assert_eq!(headers(&t)[5..], wide);
        let defs = &t["columnDefinitions"];
        assert_eq!(
            (&defs[0]["format"], &defs[4]["priority"]),
            (&json!("name"), &json!(0))
        );
        assert_eq!(
            (&defs[3]["type"], &defs[5]["priority"]),
            (&json!("string"), &json!(1))
        );
        assert_row(
            &t,
            0,
            r#"["web-7d4b9c", "2/2", "Running", "3 (5m ago)", "4h10m", "10.0.0.7", "node-a"]"#,
        );
        assert_row(
            &t,
            1,
            r#"["batch-1", "0/1", "Pending", "0", "95s", "<none>", "<none>", "<none>", "<none>"]"#,
        );
        assert_row(
            &t,
            2,
            r#"["old-1", "2/2", "Terminating", "3 (5m ago)", "4h10m"]"#,
        );
        assert!(t["rows"][0].get("conditions").is_none());
    }

    #[test]
    fn pod_status_follows_container_and_init_states() {
        let pod = |status: Value| {
            json!({"metadata": {"name": "p"}, "status": status,
                   "spec": {"initContainers": [{"name": "init"}], "containers": [{"name": "c"}]}})
        };
        let status = |s: Value| built_in("", "Pod", &[pod(s)])["rows"][0]["cells"][2].clone();
        let init = |state: Value| {
            json!({"phase": "Pending", "initContainerStatuses": [
            {"name": "init", "restartCount": 4, "state": state}]})
        };
        let main = |state: Value| json!({"phase": "Running", "containerStatuses": [{"name": "c", "state": state}]});
        check(
            "",
            "Pod",
            pod(init(json!({"running": {}}))),
            r#"["p", "0/1", "Init:0/1", "4"]"#,
        );
        let crash_loop = init(json!({"waiting": {"reason": "CrashLoopBackOff"}}));
        assert_eq!(status(crash_loop), "Init:CrashLoopBackOff");
        assert_eq!(
            status(init(json!({"terminated": {"exitCode": 2}}))),
            "Init:ExitCode:2"
        );
        let pull = main(json!({"waiting": {"reason": "ImagePullBackOff"}}));
        assert_eq!(status(pull), "ImagePullBackOff");
        let killed = main(json!({"terminated": {"exitCode": 137, "signal": 9}}));
        assert_eq!(status(killed), "Signal:9");
        let gated = json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]});
        assert_eq!(status(gated), "SchedulingGated");
        let mut done = main(json!({"terminated": {"exitCode": 0, "reason": "Completed"}}));
        done["phase"] = json!("Succeeded");
        let t = built_in("", "Pod", &[pod(done)]);
        assert_eq!(t["rows"][0]["cells"][2], "Completed");
        let completed = json!([{"type": "Completed", "status": "True", "reason": "Succeeded",
                                "message": "The pod has completed successfully."}]);
        assert_eq!(t["rows"][0]["conditions"], completed);
        // A started sidecar counts as a ready container and does not hold up initialization.
        let sidecar = json!({"metadata": {"name": "s"},
            "spec": {"initContainers": [{"name": "mesh", "restartPolicy": "Always"}], "containers": [{"name": "c"}],
                     "readinessGates": [{"conditionType": "example.com/gate"}]},
            "status": {"phase": "Running", "conditions": [{"type": "example.com/gate", "status": "True"}],
                "initContainerStatuses": [{"name": "mesh", "started": true, "ready": true, "state": {"running": {}}}],
                "containerStatuses": [{"name": "c", "ready": true, "state": {"running": {}}}]}});
        let expected =
            r#"["s", "2/2", "Running", "0", "<unknown>", "<none>", "<none>", "<none>", "1/1"]"#;
        check("", "Pod", sidecar, expected);
    }

    #[test]
    fn nodes_show_status_roles_and_wide_info() {
        let node = json!({
            "metadata": {"name": "node-a", "creationTimestamp": ago(45 * 86400),
                         "labels": {"node-role.kubernetes.io/control-plane": "", "kubernetes.io/role": "infra"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.1.5"}, {"type": "Hostname", "address": "node-a"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.1", "osImage": "Bottlerocket OS 1.20",
                                    "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://1.7.2"}}
        });
        let t = built_in("", "Node", &[node]);
        assert_eq!(
            headers(&t)[..5],
            ["Name", "Status", "Roles", "Age", "Version"]
        );
        assert_row(
            &t,
            0,
            r#"["node-a", "Ready,SchedulingDisabled", "control-plane,infra", "45d", "v1.32.1",
            "10.0.1.5", "<none>", "Bottlerocket OS 1.20", "6.1.0", "containerd://1.7.2"]"#,
        );
        let unknown = json!({"type": "Ready", "status": "Unknown"});
        let not_ready = json!({"metadata": {"name": "n"}, "status": {"conditions": [unknown]}});
        let expected =
            r#"["n", "NotReady", "<none>", "<unknown>", "", "<none>", "<none>", "<unknown>"]"#;
        check("", "Node", not_ready, expected);
        check(
            "",
            "Node",
            json!({"metadata": {"name": "n"}}),
            r#"["n", "Unknown"]"#,
        );
    }

    #[test]
    fn workloads_show_replica_counts() {
        let template = json!({"spec": {"containers": [
            {"name": "app", "image": "nginx:1.27"}, {"name": "log", "image": "busybox"}]}});
        let deployment = json!({"metadata": {"name": "web", "creationTimestamp": ago(30 * 3600)},
            "spec": {"replicas": 3, "template": template, "selector": {"matchLabels": {"app": "web"},
                     "matchExpressions": [{"key": "tier", "operator": "In", "values": ["b", "a"]}]}},
            "status": {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}});
        let expected = r#"["web", "2/3", 3, 2, "30h", "app,log", "nginx:1.27,busybox", "app=web,tier in (a,b)"]"#;
        check("apps", "Deployment", deployment, expected);
        let rs = json!({"metadata": {"name": "web-1"}, "spec": {"replicas": 3, "template": template},
                        "status": {"replicas": 3, "readyReplicas": 1}});
        let expected =
            r#"["web-1", 3, 3, 1, "<unknown>", "app,log", "nginx:1.27,busybox", "<none>"]"#;
        check("apps", "ReplicaSet", rs, expected);
        let ds = json!({"metadata": {"name": "agent"}, "spec": {"template": {"spec": {"nodeSelector": {"os": "linux"}}},
                        "selector": {"matchExpressions": [{"key": "legacy", "operator": "DoesNotExist"}]}},
                        "status": {"desiredNumberScheduled": 4, "currentNumberScheduled": 4, "numberReady": 3,
                                   "updatedNumberScheduled": 4, "numberAvailable": 3}});
        let expected = r#"["agent", 4, 4, 3, 4, 3, "os=linux", "<unknown>", "", "", "!legacy"]"#;
        check("apps", "DaemonSet", ds, expected);
        let sts = json!({"metadata": {"name": "db"}, "spec": {"template": template}, "status": {"readyReplicas": 1}});
        check(
            "apps",
            "StatefulSet",
            sts,
            r#"["db", "1/1", "<unknown>", "app,log"]"#,
        );
        let job = json!({"metadata": {"name": "once"}, "spec": {"completions": 2},
                         "status": {"succeeded": 2, "startTime": ago(600), "completionTime": ago(300),
                                    "conditions": [{"type": "Complete", "status": "True"}]}});
        check("batch", "Job", job, r#"["once", "Complete", "2/2", "5m"]"#);
        let running = json!({"metadata": {"name": "par"}, "spec": {"parallelism": 3}, "status": {"startTime": ago(95)}});
        check(
            "batch",
            "Job",
            running,
            r#"["par", "Running", "0/1 of 3", "95s"]"#,
        );
    }

    #[test]
    fn other_built_in_kinds() {
        let svc = json!({"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "clusterIPs": ["10.96.0.10"],
            "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}, {"port": 53, "protocol": "UDP"}],
            "selector": {"app": "web"}}});
        check(
            "",
            "Service",
            svc,
            r#"["lb", "LoadBalancer", "10.96.0.10", "<pending>", "80:30080/TCP,53/UDP",
            "<unknown>", "app=web"]"#,
        );
        let event = json!({"metadata": {"name": "web.17a"}, "type": "Warning", "reason": "BackOff",
            "message": " Back-off restarting \n", "count": 7, "firstTimestamp": ago(3600), "lastTimestamp": ago(60),
            "involvedObject": {"kind": "Pod", "name": "web", "fieldPath": "spec.containers{app}"},
            "source": {"component": "kubelet", "host": "node-a"}});
        let t = built_in("", "Event", &[event]);
        assert_eq!((headers(&t)[0], headers(&t)[9]), ("Last Seen", "Name"));
        assert_row(
            &t,
            0,
            r#"["60s", "Warning", "BackOff", "pod/web", "spec.containers{app}", "kubelet, node-a",
            "Back-off restarting", "60m", 7, "web.17a"]"#,
        );
        let ep = json!({"metadata": {"name": "web"}, "subsets": [{"ports": [{"port": 8080}],
            "addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}, {"ip": "fd00::3"}, {"ip": "10.0.0.4"}]}]});
        check(
            "",
            "Endpoints",
            ep,
            r#"["web", "10.0.0.1:8080,10.0.0.2:8080,[fd00::3]:8080 + 1 more..."]"#,
        );
        let cm = json!({"metadata": {"name": "c"}, "data": {"a": "1"}, "binaryData": {"b": ""}});
        check("", "ConfigMap", cm, r#"["c", 2]"#);
        let secret = json!({"metadata": {"name": "s"}, "type": "Opaque", "data": {"k": "dg=="}});
        check("", "Secret", secret, r#"["s", "Opaque", 1, "<unknown>"]"#);
        let ns = json!({"metadata": {"name": "default"}, "status": {"phase": "Active"}});
        check("", "Namespace", ns, r#"["default", "Active"]"#);
        check(
            "",
            "ServiceAccount",
            json!({"metadata": {"name": "default"}}),
            r#"["default", 0]"#,
        );
        let pdb = json!({"metadata": {"name": "web"}, "spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 1}});
        check(
            "policy",
            "PodDisruptionBudget",
            pdb,
            r#"["web", "50%", "N/A", 1, "<unknown>"]"#,
        );
        let lease = json!({"metadata": {"name": "leader", "creationTimestamp": ago(120)}, "spec": {"holderIdentity": "pod-1"}});
        check(
            "coordination.k8s.io",
            "Lease",
            lease,
            r#"["leader", "pod-1", "2m"]"#,
        );
        let crd = json!({"metadata": {"name": "nodepools.karpenter.sh", "creationTimestamp": "2025-05-01T08:30:00.123Z"}});
        let t = built_in("apiextensions.k8s.io", "CustomResourceDefinition", &[crd]);
        assert_eq!(
            (headers(&t), &t["columnDefinitions"][1]["type"]),
            (vec!["Name", "Created At"], &json!("date"))
        );
        assert_row(
            &t,
            0,
            r#"["nodepools.karpenter.sh", "2025-05-01T08:30:00Z"]"#,
        );
        let sc = json!({"metadata": {"name": "gp3", "creationTimestamp": ago(7200)},
            "provisioner": "ebs.csi.aws.com", "allowVolumeExpansion": true});
        let t = built_in("storage.k8s.io", "StorageClass", &[sc]);
        assert_eq!(
            headers(&t),
            [
                "Name",
                "Provisioner",
                "ReclaimPolicy",
                "VolumeBindingMode",
                "AllowVolumeExpansion",
                "Age"
            ]
        );
        assert_row(
            &t,
            0,
            r#"["gp3", "ebs.csi.aws.com", "Delete", "Immediate", true, "120m"]"#,
        );
    }

    #[test]
    fn envelope_and_include_object() {
        let pod = running_pod();
        let meta = json!({"resourceVersion": "99", "continue": "abc"});
        let columns = Columns::BuiltIn {
            group: "core",
            kind: "Pod",
        };
        let t = render(
            &columns,
            &[&pod],
            IncludeObject::Metadata,
            meta.clone(),
            now(),
        );
        assert_eq!(
            (&t["kind"], &t["apiVersion"]),
            (&json!("Table"), &json!("meta.k8s.io/v1"))
        );
        assert_eq!(t["metadata"], meta);
        let partial = json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": pod["metadata"]});
        assert_eq!(t["rows"][0]["object"], partial);
        let full = render(&columns, &[&pod], IncludeObject::Object, Value::Null, now());
        assert_eq!(full["rows"][0]["object"], pod);
        let none = render(&columns, &[&pod], IncludeObject::None, Value::Null, now());
        assert_eq!(
            (&none["rows"][0]["object"], &none["metadata"]),
            (&Value::Null, &json!({}))
        );
        assert_eq!("".parse(), Ok(IncludeObject::Metadata));
        assert_eq!("None".parse(), Ok(IncludeObject::None));
        let err = "all".parse::<IncludeObject>();
        assert_eq!(err, Err(TableError::IncludeObject("all".into())));
    }

    #[test]
    fn kubectl_paths_translate_to_rfc9535() {
        #[rustfmt::skip]
        let cases = [
            (r".metadata.labels.node\.kubernetes\.io/instance-type", "$.metadata.labels['node.kubernetes.io/instance-type']"),
            (r#".status.conditions[?(@.type=="Ready")].status"#, r#"$.status.conditions[?(@.type=="Ready")].status"#),
            (".spec.nodeClassRef.name", "$.spec.nodeClassRef.name"),
            (".status.providerID", "$.status.providerID"),
            (".metadata.creationTimestamp", "$.metadata.creationTimestamp"),
            (".status.imageID", "$.status.imageID"),
            ("{.spec.containers[*].image}", "$.spec.containers[*].image"),
            ("$..name", "$..name"),
            (".metadata.annotations['a.b/c']", "$.metadata.annotations['a.b/c']"),
        ];
        for (kubectl, want) in cases {
            assert_eq!(kubectl_json_path(kubectl).as_deref(), Ok(want), "{kubectl}");
            assert!(
                parse_json_path(want).is_ok(),
                "jsonpath-rust rejects {want}"
            );
        }
        assert!(kubectl_json_path(".a[0").is_err());
        let bad = PrinterColumn {
            json_path: ".status[?(@.x==".into(),
            ..Default::default()
        };
        assert!(bad.validate().is_err());
    }

    fn column(name: &str, type_: &str, priority: i32, json_path: &str) -> PrinterColumn {
        let (name, type_, json_path) = (name.into(), type_.into(), json_path.into());
        PrinterColumn {
            name,
            type_,
            priority,
            json_path,
            ..Default::default()
        }
    }

    #[test]
    fn crd_columns_are_evaluated_per_object() {
        let columns = [
            column(
                "Type",
                "string",
                0,
                r".metadata.labels.node\.kubernetes\.io/instance-type",
            ),
            column(
                "Ready",
                "string",
                0,
                r#".status.conditions[?(@.type=="Ready")].status"#,
            ),
            column("Age", "date", 0, ".metadata.creationTimestamp"),
            column("ID", "string", 1, ".status.providerID"),
            column("NodeClass", "string", 1, ".spec.nodeClassRef.name"),
            column("ImageID", "string", 1, ".status.imageID"),
            column("Pods", "integer", 0, ".status.pods"),
            column("Weight", "number", 0, ".spec.weight"),
            column("Drifted", "boolean", 0, ".status.drifted"),
            column("Conditions", "string", 1, ".status.conditions[*].type"),
        ];
        let claim = json!({
            "metadata": {"name": "default-x7k2p", "creationTimestamp": ago(303),
                         "labels": {"node.kubernetes.io/instance-type": "m5.large"}},
            "spec": {"nodeClassRef": {"name": "default"}, "weight": 10},
            "status": {"providerID": "aws:///us-west-2a/i-0abc", "pods": 12.0, "drifted": "yes",
                       "conditions": [{"type": "Launched", "status": "True"}, {"type": "Ready", "status": "False"}]}
        });
        let t = table(Columns::Custom(&columns), &[claim]);
        assert_eq!(headers(&t)[..4], ["Name", "Type", "Ready", "Age"]);
        let defs = &t["columnDefinitions"];
        assert_eq!(
            (&defs[3]["type"], &defs[4]["priority"]),
            (&json!("date"), &json!(1))
        );
        let generated =
            "Custom resource definition column (in JSONPath format): .status.providerID";
        assert_eq!(defs[4]["description"], generated);
        // Missing paths and values of the wrong type are null; several matches give the first.
        assert_row(
            &t,
            0,
            r#"["default-x7k2p", "m5.large", "False", "5m3s", "aws:///us-west-2a/i-0abc",
            "default", null, 12, 10.0, null, "Launched"]"#,
        );
        let bad_date = json!({"metadata": {"name": "b", "creationTimestamp": "yesterday"}});
        assert_row(
            &table(Columns::Custom(&columns[2..3]), &[bad_date]),
            0,
            r#"["b", "<invalid>"]"#,
        );
    }

    #[test]
    fn crd_without_columns_gets_age_and_bad_paths_truncate() {
        let obj =
            json!({"metadata": {"name": "x", "creationTimestamp": ago(47 * 60)}, "spec": {"a": 1}});
        let t = table(Columns::Custom(&[]), std::slice::from_ref(&obj));
        assert_eq!(
            (headers(&t), &t["columnDefinitions"][1]["type"]),
            (vec!["Name", "Age"], &json!("date"))
        );
        assert_row(&t, 0, r#"["x", "47m"]"#);
        let columns = [
            column("A", "integer", 0, ".spec.a"),
            column("Bad", "string", 0, ".spec[?("),
            column("C", "string", 0, ".spec.a"),
        ];
        let t = table(Columns::Custom(&columns), &[obj]);
        assert_eq!(headers(&t), ["Name", "A"]);
        assert_row(&t, 0, r#"["x", 1]"#);
        let declared = json!({"name": "Zone", "type": "string", "priority": 1, "jsonPath": ".metadata.labels.zone"});
        assert_eq!(
            PrinterColumn::from_crd(&declared),
            column("Zone", "string", 1, ".metadata.labels.zone")
        );
    }
}

//! The Grafana dashboards in `deploy/grafana/` read only series `/metrics` serves: a short
//! sandbox scenario (pods provisioned, a DaemonSet on every node, a scale-down whose empty node
//! consolidation deletes, so termination and disruption series exist) fills every family;
//! then each dashboard's PromQL (panel targets and templating queries) is taken apart into
//! metric names and the labels its selectors, groupings and `label_values` use, and every one
//! must be in the scrape with those labels and literal `=` values.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use controller::runtime::Settings;
use controller::runtime::metrics::{Sample, parse_samples};
use serde_json::Value;
use tests::{Options, TestCluster, deployment, http_get};

const DASHBOARDS: [&str; 2] = [
    "karpenter-capacity-dashboard.json",
    "karpenter-performance-dashboard.json",
];

/// Labels Prometheus adds from its scrape configuration (the target's job, an external
/// `cluster` label in multi-cluster setups), not the exporter's.
const SCRAPE_CONFIG_LABELS: [&str; 2] = ["job", "cluster"];

/// Equality matchers whose value a healthy cluster may lack, with the panel coping: the spot
/// share is `or vector(0)` when no node is spot (the sandbox's nodes are whatever is cheapest).
const DATA_DEPENDENT: [(&str, &str); 1] = [("capacity_type", "spot")];

/// How long the scrape has to show every series the dashboards read.
const SETTLE: Duration = Duration::from_secs(90);

/// Aggregation operators and keywords: identifiers that are not metric names.
const NOT_METRICS: [&str; 18] = [
    "sum",
    "min",
    "max",
    "avg",
    "count",
    "stddev",
    "stdvar",
    "topk",
    "bottomk",
    "quantile",
    "count_values",
    "group",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "by",
];

/// One vector selector of an expression: its metric, every label the expression needs it to
/// have (matchers, `by`/`without`/`on`/`ignoring` groupings, `label_values`' label) and its
/// equality matchers.
#[derive(Debug, Default, PartialEq)]
struct Reference {
    metric: String,
    labels: BTreeSet<String>,
    equal: Vec<(String, String)>,
}

#[derive(Debug, PartialEq)]
enum Token {
    Ident(String),
    Str(String),
    Sym(String),
}

fn tokens(expr: &str) -> Vec<Token> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '#' {
            // A comment runs to the end of the line.
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '[' {
            // A range (`[5m]`, `[$__rate_interval]`) or subquery: no selectors inside.
            while i < chars.len() && chars[i] != ']' {
                i += 1;
            }
            i += 1;
        } else if c == '"' || c == '\'' || c == '`' {
            let mut s = String::new();
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' && c != '`' {
                    i += 1;
                }
                s.push(chars[i]);
                i += 1;
            }
            i += 1;
            out.push(Token::Str(s));
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() || c == '.' {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c == '$' {
            panic!("a dashboard variable left in label or metric position: {expr}");
        } else if "=!~<>".contains(c) {
            let start = i;
            while i < chars.len() && "=!~<>".contains(chars[i]) {
                i += 1;
            }
            out.push(Token::Sym(chars[start..i].iter().collect()));
        } else {
            out.push(Token::Sym(c.to_string()));
            i += 1;
        }
    }
    out
}

fn is_sym(t: Option<&Token>, s: &str) -> bool {
    matches!(t, Some(Token::Sym(x)) if x == s)
}

/// The selectors of a PromQL expression (or of a `label_values(selector, label)` variable
/// query). Grouping labels are required of every selector of the expression: the dashboards'
/// expressions aggregate one family, or families that share those labels.
fn references(expr: &str) -> Vec<Reference> {
    let trimmed = expr.trim();
    if let Some(args) = trimmed
        .strip_prefix("label_values(")
        .and_then(|a| a.strip_suffix(')'))
    {
        let (selector, label) = args
            .rsplit_once(',')
            .unwrap_or_else(|| panic!("label_values without a metric: {expr}"));
        let mut refs = references(selector);
        for r in &mut refs {
            r.labels.insert(label.trim().to_string());
        }
        return refs;
    }
    let toks = tokens(expr);
    let mut refs: Vec<Reference> = Vec::new();
    let mut grouping = BTreeSet::new();
    let mut i = 0;
    while i < toks.len() {
        let Token::Ident(word) = &toks[i] else {
            assert!(
                !is_sym(toks.get(i), "{"),
                "a selector without a metric name: {expr}"
            );
            i += 1;
            continue;
        };
        let next = toks.get(i + 1);
        let grouping_clause = [
            "by",
            "without",
            "on",
            "ignoring",
            "group_left",
            "group_right",
        ];
        if grouping_clause.contains(&word.as_str()) && is_sym(next, "(") {
            i += 2;
            while i < toks.len() && !is_sym(toks.get(i), ")") {
                if let Token::Ident(label) = &toks[i] {
                    grouping.insert(label.clone());
                }
                i += 1;
            }
            i += 1;
        } else if is_sym(next, "(") || NOT_METRICS.contains(&word.as_str()) {
            // A function call or an operator.
            i += 1;
        } else {
            let mut r = Reference {
                metric: word.clone(),
                ..Reference::default()
            };
            i += 1;
            if is_sym(toks.get(i), "{") {
                i += 1;
                while !is_sym(toks.get(i), "}") {
                    match (toks.get(i), toks.get(i + 1), toks.get(i + 2)) {
                        (Some(Token::Ident(l)), Some(Token::Sym(op)), Some(Token::Str(v))) => {
                            r.labels.insert(l.clone());
                            if op == "=" {
                                r.equal.push((l.clone(), v.clone()));
                            }
                            i += 3;
                        }
                        _ => panic!("cannot read the matchers of {word} in {expr}"),
                    }
                    if is_sym(toks.get(i), ",") {
                        i += 1;
                    }
                }
                i += 1;
            }
            refs.push(r);
        }
    }
    for r in &mut refs {
        r.labels.extend(grouping.iter().cloned());
    }
    refs
}

/// Every PromQL expression of a dashboard: its panels' (and rows' panels') targets and its
/// query variables, once per option of each custom variable it uses (`by
/// ($distribution_filter)`).
fn expressions(dashboard: &Value) -> Vec<String> {
    fn panels(list: &Value, out: &mut Vec<String>) {
        for p in list.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push(e.to_string());
                }
            }
            panels(&p["panels"], out);
        }
    }
    let mut raw = Vec::new();
    panels(&dashboard["panels"], &mut raw);
    let variables = dashboard["templating"]["list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for v in &variables {
        if v["type"] == "query" {
            let q = v["query"]["query"].as_str().or(v["query"].as_str());
            raw.push(q.expect("a query variable's query").to_string());
        }
    }
    let custom: BTreeMap<String, Vec<String>> = variables
        .iter()
        .filter(|v| v["type"] == "custom")
        .map(|v| {
            let options = v["query"]
                .as_str()
                .unwrap_or_default()
                .split(',')
                .map(|o| o.trim().to_string())
                .collect();
            (v["name"].as_str().unwrap_or_default().to_string(), options)
        })
        .collect();
    let mut out = Vec::new();
    for e in raw {
        let mut expanded = vec![e];
        for (name, options) in &custom {
            expanded = expanded
                .into_iter()
                .flat_map(|e| {
                    let uses =
                        e.contains(&format!("${name}")) || e.contains(&format!("${{{name}}}"));
                    if uses {
                        options
                            .iter()
                            .map(|o| {
                                e.replace(&format!("${{{name}}}"), o)
                                    .replace(&format!("${name}"), o)
                            })
                            .collect()
                    } else {
                        vec![e]
                    }
                })
                .collect();
        }
        out.extend(expanded);
    }
    out
}

fn dashboard(file: &str) -> Value {
    let path = format!("{}/../deploy/grafana/{file}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// What of `r` the scrape lacks (`None` when a sample of the metric has every label and
/// equality matcher, scrape-configuration labels aside).
fn missing(samples: &[Sample], r: &Reference) -> Option<String> {
    let labels: Vec<&String> = r
        .labels
        .iter()
        .filter(|l| !SCRAPE_CONFIG_LABELS.contains(&l.as_str()))
        .collect();
    let equal: Vec<&(String, String)> = r
        .equal
        .iter()
        .filter(|(l, v)| {
            !SCRAPE_CONFIG_LABELS.contains(&l.as_str())
                && !v.contains('$')
                && !DATA_DEPENDENT.contains(&(l.as_str(), v.as_str()))
        })
        .collect();
    let found = samples.iter().any(|s| {
        s.name == r.metric
            && labels.iter().all(|l| s.labels.contains_key(*l))
            && equal.iter().all(|(l, v)| s.labels.get(l) == Some(v))
    });
    (!found).then(|| format!("{} with labels {labels:?} and {equal:?}", r.metric))
}

#[test]
fn promql_selectors_are_read_with_their_labels() {
    let refs = references(
        "sum by (cluster, nodepool) (rate(a_total{nodepool=~\"$x\", r=\"cpu\"}[$__rate_interval])) / on (nodepool) b # note",
    );
    assert_eq!(
        refs.iter().map(|r| r.metric.as_str()).collect::<Vec<_>>(),
        ["a_total", "b"]
    );
    assert_eq!(
        refs[0].labels,
        ["cluster", "nodepool", "r"].map(String::from).into()
    );
    assert_eq!(refs[0].equal, [("r".to_string(), "cpu".to_string())]);
    assert_eq!(
        refs[1].labels,
        ["cluster", "nodepool"].map(String::from).into()
    );
    let refs = references("label_values(m{job=\"karpenter\"}, controller)");
    assert_eq!(refs.len(), 1);
    assert_eq!(
        refs[0].labels,
        ["controller", "job"].map(String::from).into()
    );
    let refs =
        references("histogram_quantile(0.9, sum by (le) (rate(h_bucket[10m]))) or vector(0)");
    assert_eq!(refs.len(), 1);
    assert_eq!(refs[0].metric, "h_bucket");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_series_the_grafana_dashboards_read_is_exported() {
    // Everything each dashboard reads, before any cluster starts (a parse error fails fast).
    let mut wanted: Vec<(&str, String, Reference)> = Vec::new();
    for file in DASHBOARDS {
        let d = dashboard(file);
        assert_eq!(d["templating"]["list"][0]["type"], "datasource", "{file}");
        let exprs = expressions(&d);
        assert!(exprs.len() >= 5, "{file}: {exprs:?}");
        for e in exprs {
            let refs = references(&e);
            assert!(!refs.is_empty(), "{file}: no metric in {e}");
            wanted.extend(refs.into_iter().map(|r| (file, e.clone(), r)));
        }
    }

    // Three web pods, one per node, a DaemonSet pod on each; NodePool limits; consolidation
    // as soon as a node is empty.
    let web = deployment("web", 3, "900m", "1Gi").replace(
        "      containers:\n",
        "      affinity:\n        podAntiAffinity:\n          requiredDuringSchedulingIgnoredDuringExecution:\n          - labelSelector: {matchLabels: {app: web}}\n            topologyKey: kubernetes.io/hostname\n      containers:\n",
    );
    let logs = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: logs\nspec:\n  selector:\n    matchLabels: {app: logs}\n  template:\n    metadata:\n      labels: {app: logs}\n    spec:\n      containers:\n      - name: c\n        image: busybox\n        resources:\n          requests: {cpu: 50m, memory: 32Mi}\n";
    let c = TestCluster::start(
        &format!("{web}---\n{logs}"),
        Options {
            settings: Settings {
                disruption_poll: Duration::from_millis(500),
                consolidation_validation_delay: Duration::from_secs(2),
                ..Settings::default()
            },
            ..Options::default()
        },
    )
    .await;
    c.merge_patch(
        "nodepool",
        "default",
        r#"{"spec":{"limits":{"cpu":"1000","memory":"4000Gi"},"disruption":{"consolidateAfter":"0s","budgets":[{"nodes":"100%"}]}}}"#,
    )
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a loopback port");
    let addr = listener.local_addr().expect("bound address");
    tokio::spawn(controller::runtime::http::serve_metrics(
        listener,
        Arc::clone(&c.cluster.ctx),
        tokio::sync::watch::channel(true).1,
        std::future::pending(),
    ));
    c.eventually("the web pods bound", SETTLE, |c| {
        c.objects("", "pods")
            .iter()
            .filter(|p| p["metadata"]["labels"]["app"] == "web")
            .filter(|p| p["spec"]["nodeName"].is_string())
            .count()
            == 3
    })
    .await;
    // One node left with only its DaemonSet pod: consolidation deletes it.
    c.kubectl_ok(&["scale", "deployment/web", "--replicas=2"])
        .await;

    let deadline = Instant::now() + SETTLE;
    loop {
        let (status, head, body) = http_get(addr, "/metrics").await;
        assert_eq!(status, 200, "scrape failed: {head}");
        let samples = parse_samples(&body).expect("the exposition parses");
        let absent: Vec<String> = wanted
            .iter()
            .filter_map(|(file, e, r)| {
                missing(&samples, r).map(|m| format!("{file}: {m}\n    in {e}"))
            })
            .collect();
        // Every node's DaemonSet pod (pinned to it by a `matchFields` node affinity) is in its
        // daemon requests, for the node table's DaemonSet columns.
        let nodes: BTreeSet<&String> = samples
            .iter()
            .filter(|s| s.matches("karpenter_nodes_allocatable", &[("resource_type", "cpu")]))
            .filter_map(|s| s.labels.get("node_name"))
            .collect();
        let daemons: BTreeSet<&String> = samples
            .iter()
            .filter(|s| {
                s.matches(
                    "karpenter_nodes_total_daemon_requests",
                    &[("resource_type", "cpu")],
                ) && (s.value - 0.05).abs() < 1e-9
            })
            .filter_map(|s| s.labels.get("node_name"))
            .collect();
        if absent.is_empty() && !nodes.is_empty() && nodes == daemons {
            let metrics: BTreeSet<&str> =
                wanted.iter().map(|(_, _, r)| r.metric.as_str()).collect();
            println!(
                "{} selectors over {metrics:?} all in the scrape",
                wanted.len()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the dashboards read series /metrics does not serve:\n{}\nnodes {nodes:?}, with 50m of DaemonSet cpu {daemons:?}\n---- /metrics ----\n{body}",
            absent.join("\n")
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

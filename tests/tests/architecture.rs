//! The workspace's layering, checked from the source: no module of any crate imports a module
//! that imports it back (directly or through others), the pure crate and the plugin keep out of
//! the operator's runtime, and the controller's disruption orchestrator decides nothing itself
//! (its decisions are `karpenter_core::disruption`'s). `cargo test -p tests --test integration architecture:: -- --nocapture`
//! prints the module graph's size per crate.
//!
//! Modules are files (`src/a.rs` and `src/a/mod.rs` are module `a`); an import is any path
//! `crate::…`, `super::…` or `self::…` in a file's non-test code (a file is read up to its first
//! top-level `#[cfg(test)]`), resolved to the longest module path that is a file. Test files
//! (`tests.rs`, `*_tests.rs`, `testing.rs`, `fixtures.rs`) are left out: they may use anything.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every crate of the workspace with a `src/` folder.
const CRATES: &[&str] = &[
    "crds",
    "faults",
    "karpenter-core",
    "ec2api",
    "controller",
    "sandbox",
    "karpenter",
    "kubectl-karpenter",
    "testutil",
    "tests",
];

/// Normal dependencies the pure crate must never pull in, directly or transitively (the
/// operator library among them: `karpenter_core::disruption` imports no controller code).
const NOT_IN_CORE: &[&str] = &[
    "controller",
    "sandbox",
    "tokio",
    "kube-client",
    "kube-runtime",
    "hyper",
    "axum",
    "aws-sdk-ec2",
    "aws-config",
];

/// Normal dependencies the plugin must never pull in (the operator's runtime).
const NOT_IN_PLUGIN: &[&str] = &["axum", "prometheus-client", "sandbox", "controller"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the workspace")
        .to_path_buf()
}

/// Whether a file under `src/` (path relative to it) holds only tests or test fixtures.
fn is_test_file(rel: &Path) -> bool {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name == "testing.rs"
        || name == "fixtures.rs"
        || rel.components().any(|c| c.as_os_str() == "tests")
}

/// The non-test `.rs` files below `src`.
fn rust_files(src: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && !is_test_file(path.strip_prefix(src).unwrap_or(&path))
        {
            out.push(path);
        }
    }
}

/// The module path of a source file: `src/lib.rs` and `src/main.rs` are the root, `src/a/mod.rs`
/// and `src/a.rs` are `a`, `src/a/b.rs` is `a::b`. A binary's root (`main.rs` beside `lib.rs`)
/// is kept apart as `<main>`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("file under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    match last.as_str() {
        "lib.rs" | "mod.rs" => {}
        "main.rs" if parts.is_empty() => parts.push("<main>".into()),
        _ => parts.push(last.trim_end_matches(".rs").to_owned()),
    }
    parts
}

/// The code of a file up to its first top-level `#[cfg(test)]`, without `//` comments.
fn non_test_code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.starts_with("#[cfg(test)]") {
            break;
        }
        let code = line.split("//").next().unwrap_or("");
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Every path the code names that starts with `crate`, `super` or `self`, with one level of
/// `{…}` groups expanded (`crate::a::{b, c::d}` gives `crate::a::b` and `crate::a::c::d`).
fn relative_paths(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let starts = [&b"crate::"[..], b"super::", b"self::"]
            .iter()
            .any(|p| rest.starts_with(p));
        if !starts || (i > 0 && ident(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < bytes.len() && ident(bytes[j]) {
            j += 1;
        }
        let head: Vec<String> = code[i..j]
            .split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        if j < bytes.len() && bytes[j] == b'{' {
            let end = bytes[j..]
                .iter()
                .position(|c| *c == b'}')
                .map_or(bytes.len(), |e| j + e);
            for item in code[j + 1..end].split(',') {
                let item = item.split(" as ").next().unwrap_or("").trim();
                if item.is_empty() {
                    continue;
                }
                let mut path = head.clone();
                path.extend(item.split("::").map(|s| s.trim().to_owned()));
                out.push(path);
            }
            i = end;
        } else {
            out.push(head);
            i = j;
        }
    }
    out
}

/// The module a relative path names when written in module `here`: `crate::` from the root,
/// `self::` from `here`, each `super::` one level up; the longest prefix that is a module.
fn resolve(
    here: &[String],
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let mut base: Vec<String> = here.iter().filter(|p| *p != "<main>").cloned().collect();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().map(String::as_str) == Some("super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    let mut full = base;
    full.extend(rest.iter().cloned());
    (0..=full.len())
        .rev()
        .map(|n| full[..n].to_vec())
        .find(|m| modules.contains(m))
}

/// Strongly connected components with more than one module (Tarjan), each sorted.
fn cycles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on_stack: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a Vec<String>) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        let edges = s.edges;
        for w in edges.get(v).into_iter().flatten() {
            let w = edges.get_key_value(w).map_or(w, |(k, _)| k);
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v, low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v, low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                component.push(w.clone());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The import graph of one crate's modules: module -> modules it names other than itself
/// (`mod` declarations are not imports: a parent that only declares a child does not depend on
/// it).
fn graph(krate: &str) -> BTreeMap<Vec<String>, BTreeSet<Vec<String>>> {
    let src = workspace().join(krate).join("src");
    let mut files = Vec::new();
    rust_files(&src, &src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for file in &files {
        let here = module_of(&src, file);
        let text = std::fs::read_to_string(file).expect("readable source");
        let targets = edges.entry(here.clone()).or_default();
        for path in relative_paths(&non_test_code(&text)) {
            if let Some(target) = resolve(&here, &path, &modules)
                && target != here
            {
                targets.insert(target);
            }
        }
    }
    edges
}

fn show(module: &[String]) -> String {
    if module.is_empty() {
        "crate".into()
    } else {
        module.join("::")
    }
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let mut found = Vec::new();
    for krate in CRATES {
        let edges = graph(krate);
        let arrows: usize = edges.values().map(BTreeSet::len).sum();
        println!("{krate}: {} modules, {arrows} imports", edges.len());
        for component in cycles(&edges) {
            let names: Vec<String> = component.iter().map(|m| show(m)).collect();
            found.push(format!("{krate}: {}", names.join(" <-> ")));
        }
    }
    assert!(found.is_empty(), "import cycles:\n{}", found.join("\n"));
}

#[test]
fn the_checker_finds_a_cycle_and_resolves_groups() {
    let code = "use crate::a::{b, c::D};\nuse super::e::F as G;\nfn f() { self::h::i(); }\n";
    assert_eq!(
        relative_paths(code),
        vec![
            vec!["crate", "a", "b"],
            vec!["crate", "a", "c", "D"],
            vec!["super", "e", "F"],
            vec!["self", "h", "i"],
        ]
        .into_iter()
        .map(|p| p.into_iter().map(String::from).collect::<Vec<_>>())
        .collect::<Vec<_>>()
    );
    let m = |s: &str| -> Vec<String> {
        s.split("::")
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect()
    };
    let modules: BTreeSet<Vec<String>> = [m(""), m("a"), m("a::c"), m("x")].into_iter().collect();
    assert_eq!(
        resolve(&m("x"), &m("crate::a::c::D"), &modules),
        Some(m("a::c"))
    );
    assert_eq!(
        resolve(&m("a::c"), &m("super::super::x::Y"), &modules),
        Some(m("x"))
    );
    let mut edges = BTreeMap::new();
    edges.insert(m("a"), BTreeSet::from([m("x")]));
    edges.insert(m("x"), BTreeSet::from([m("a::c")]));
    edges.insert(m("a::c"), BTreeSet::from([m("a")]));
    assert_eq!(cycles(&edges), vec![vec![m("a"), m("a::c"), m("x")]]);
}

/// `cargo tree -e normal` of `package` (all features), as package names.
fn normal_dependencies(package: &str) -> BTreeSet<String> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--all-features",
            "--prefix",
            "none",
            "-p",
        ])
        .arg(package)
        .current_dir(workspace())
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {package}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_pure_core_and_the_plugin_keep_out_of_the_runtime() {
    let core = normal_dependencies("karpenter-core");
    let leaked: Vec<&&str> = NOT_IN_CORE.iter().filter(|d| core.contains(**d)).collect();
    assert!(leaked.is_empty(), "karpenter-core depends on {leaked:?}");
    let plugin = normal_dependencies("kubectl-karpenter");
    let leaked: Vec<&&str> = NOT_IN_PLUGIN
        .iter()
        .filter(|d| plugin.contains(**d))
        .collect();
    assert!(leaked.is_empty(), "kubectl-karpenter depends on {leaked:?}");
    let controller = normal_dependencies("controller");
    assert!(
        !controller.contains("sandbox"),
        "the operator library depends on the sandbox"
    );
}

#[test]
fn the_disruption_orchestrator_decides_nothing_itself() {
    // A decision is a pure function of a snapshot: `karpenter_core::disruption::consolidation::
    // decide`, `…::upgrade`, `…::interruption`. The controller's `disruption/` runs them and
    // carries their answer out, so it defines no `decide…` function of its own.
    let src = workspace().join("controller").join("src");
    let mut files = Vec::new();
    rust_files(&src, &src.join("disruption"), &mut files);
    assert!(
        !files.is_empty(),
        "controller/src/disruption/ has source files"
    );
    let mut found = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable source");
        for line in non_test_code(&text).lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            if let Some(i) = words.iter().position(|w| *w == "fn")
                && words
                    .get(i + 1)
                    .is_some_and(|name| name.starts_with("decide"))
            {
                let rel = file.strip_prefix(&src).unwrap_or(file);
                found.push(format!("{}: {}", rel.display(), line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "decisions belong in karpenter_core::disruption:\n{}",
        found.join("\n")
    );
}

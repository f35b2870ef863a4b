//! Every relative link in README.md and docs/**/*.md resolves: to an existing file or folder of
//! the repository and, for a `#anchor` into a Markdown file (or the same file), to one of its
//! headings as GitHub names them. Links to other sites (`https:`, `mailto:`) are not followed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("repository root")
}

/// README.md and every Markdown file under docs/, sorted.
fn pages(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read docs/") {
            let path = entry.expect("docs/ entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    let mut out = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut out);
    out.sort();
    out
}

/// The lines of a Markdown file outside fenced code blocks, with inline code spans removed.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        out.push(line.to_string());
    }
    out
}

fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut in_code = false;
    for c in line.chars() {
        if c == '`' {
            in_code = !in_code;
            out.push(' ');
        } else if !in_code {
            out.push(c);
        }
    }
    out
}

/// Inline link targets `[text](target)` and reference definitions `[label]: target`.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[')
            && let Some((_, target)) = trimmed.split_once("]: ")
        {
            out.push(target.split_whitespace().next().unwrap_or("").to_string());
            continue;
        }
        let line = without_code_spans(&line);
        let mut rest = line.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            let target = after[..end].split_whitespace().next().unwrap_or("");
            out.push(target.to_string());
            rest = &after[end..];
        }
    }
    out
}

/// The anchors GitHub gives a file's headings: lower case, punctuation dropped, spaces to
/// hyphens, a repeated heading suffixed `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in prose(text) {
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut unique = slug.clone();
        let mut n = 0;
        while out.contains(&unique) {
            n += 1;
            unique = format!("{slug}-{n}");
        }
        out.insert(unique);
    }
    out
}

/// Why a link does not resolve, or None when it does.
fn broken(root: &Path, page: &Path, text: &str, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("empty link".into());
    }
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        page.to_path_buf()
    } else if let Some(from_root) = path.strip_prefix('/') {
        root.join(from_root)
    } else {
        page.parent().expect("page folder").join(path)
    };
    if !file.exists() {
        return Some(format!("{} does not exist", file.display()));
    }
    let anchor = anchor?;
    if file.extension().is_none_or(|e| e != "md") {
        return None;
    }
    let content = if path.is_empty() {
        text.to_string()
    } else {
        std::fs::read_to_string(&file).expect("linked page")
    };
    let known = anchors(&content);
    (!known.contains(anchor)).then(|| format!("no heading #{anchor} in {}", file.display()))
}

#[test]
fn every_relative_link_in_the_readme_and_docs_resolves() {
    let root = repo_root();
    let pages = pages(&root);
    assert!(pages.len() > 1, "no pages under docs/");
    let mut bad = Vec::new();
    let mut checked = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("page");
        for target in links(&text) {
            checked += 1;
            if let Some(why) = broken(&root, page, &text, &target) {
                let shown = page
                    .strip_prefix(&root)
                    .unwrap_or(page)
                    .display()
                    .to_string();
                bad.push(format!("{shown}: ({target}) {why}"));
            }
        }
    }
    assert!(checked > 0, "no links found");
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

#[test]
fn the_checker_sees_links_and_headings_as_github_does() {
    let text = "# Install with Helm: `charts/karpenter`\n## A\n## A\n```\n# not a heading [x](nowhere)\n```\nSee [this](other.md#a-1) and `[code](nope)`.\n[ref]: ref.md\n";
    let found = anchors(text);
    for a in ["install-with-helm-chartskarpenter", "a", "a-1"] {
        assert!(found.contains(a), "{a} not in {found:?}");
    }
    assert!(!found.contains("not-a-heading-xnowhere"));
    assert_eq!(links(text), ["other.md#a-1", "ref.md"]);
}

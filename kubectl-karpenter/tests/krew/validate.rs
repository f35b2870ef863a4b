//! A krew plugin manifest validator with krew's rules (kubernetes-sigs/krew
//! `internal/index/validation`, and what `validate-krew-manifest` checks by installing every
//! platform): kind and apiVersion, a plugin name that is valid and equals the file name, a
//! `vX.Y.Z` semver version, a short description and homepage, and per platform a non-empty
//! `os`/`arch` selector that matches a platform krew supports and overlaps no other platform's,
//! an archive URI, a lowercase hex sha256 that matches the archive, and an archive holding the
//! `bin` and a license file. What krew only warns about is checked too, reported as
//! `krew warns: …`: description and caveats lines longer than 80 characters, a
//! shortDescription longer than 70. [`missing_platforms`] checks that a release covers the
//! platforms we ship ([`RELEASE_PLATFORMS`]).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;
use std::process::Command;

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// krew's manifest API version.
pub const API_VERSION: &str = "krew.googlecontainertools.github.com/v1alpha2";

/// The platforms krew supports (Go's GOOS/GOARCH), as krew's validation lists them: every
/// platform selector must match one, and no two selectors may match the same one.
pub const SUPPORTED_PLATFORMS: [(&str, &str); 11] = [
    ("windows", "386"),
    ("windows", "amd64"),
    ("windows", "arm64"),
    ("linux", "386"),
    ("linux", "amd64"),
    ("linux", "arm"),
    ("linux", "arm64"),
    ("linux", "ppc64le"),
    ("darwin", "386"),
    ("darwin", "amd64"),
    ("darwin", "arm64"),
];

/// The platforms a release of kubectl-karpenter ships (`scripts/release.sh` without
/// `--host-only`).
pub const RELEASE_PLATFORMS: [(&str, &str); 4] = [
    ("linux", "amd64"),
    ("linux", "arm64"),
    ("darwin", "amd64"),
    ("darwin", "arm64"),
];

/// File names krew accepts as the license (compared case-insensitively, anywhere in the
/// archive).
pub const LICENSE_NAMES: [&str; 8] = [
    "license",
    "license.txt",
    "license.md",
    "licenses",
    "licenses.txt",
    "licenses.md",
    "copying",
    "copying.txt",
];

/// Names Windows reserves for devices; krew refuses them as plugin names.
const WINDOWS_RESERVED: [&str; 22] = [
    "con", "prn", "aux", "nul", "com1", "com2", "com3", "com4", "com5", "com6", "com7", "com8",
    "com9", "lpt1", "lpt2", "lpt3", "lpt4", "lpt5", "lpt6", "lpt7", "lpt8", "lpt9",
];

/// The longest `shortDescription` krew takes without a warning.
pub const MAX_SHORT_DESCRIPTION: usize = 70;

/// The longest line of `description` and `caveats` krew takes without a warning.
pub const MAX_LINE: usize = 80;

/// A krew `Plugin` manifest (the fields krew reads).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Must be [`API_VERSION`].
    pub api_version: String,
    /// Must be `Plugin`.
    pub kind: String,
    /// `name`.
    pub metadata: Metadata,
    /// The plugin.
    pub spec: Spec,
}

/// `metadata`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Metadata {
    /// The plugin name: `kubectl <name>`.
    pub name: String,
}

/// `spec`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    /// `vX.Y.Z`.
    pub version: String,
    /// Project URL.
    #[serde(default)]
    pub homepage: String,
    /// A few words.
    #[serde(default)]
    pub short_description: String,
    /// Longer text.
    #[serde(default)]
    pub description: String,
    /// Shown after install.
    #[serde(default)]
    pub caveats: Option<String>,
    /// One entry per archive.
    #[serde(default)]
    pub platforms: Vec<Platform>,
}

/// `spec.platforms[]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Platform {
    /// Which `os`/`arch` the entry is for.
    #[serde(default)]
    pub selector: Selector,
    /// Where the archive is downloaded from.
    #[serde(default)]
    pub uri: String,
    /// The archive's sha256, 64 lowercase hex digits.
    #[serde(default)]
    pub sha256: String,
    /// The executable inside the archive.
    #[serde(default)]
    pub bin: String,
}

/// A Kubernetes label selector over the labels `os` and `arch`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    /// Labels that must be equal.
    #[serde(default)]
    pub match_labels: BTreeMap<String, String>,
    /// Expressions that must all hold.
    #[serde(default)]
    pub match_expressions: Vec<Expression>,
}

/// One `matchExpressions` entry.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct Expression {
    /// `os` or `arch`.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// For `In` and `NotIn`.
    #[serde(default)]
    pub values: Vec<String>,
}

impl Selector {
    /// Whether the selector is empty (would match every platform; krew refuses that).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

    /// The keys it uses.
    fn keys(&self) -> impl Iterator<Item = &str> {
        self.match_labels
            .keys()
            .map(String::as_str)
            .chain(self.match_expressions.iter().map(|e| e.key.as_str()))
    }

    /// Whether it matches the platform `os`/`arch` (Kubernetes label selector semantics).
    ///
    /// Errors: an unknown operator.
    pub fn matches(&self, os: &str, arch: &str) -> Result<bool, String> {
        let label = |key: &str| match key {
            "os" => Some(os),
            "arch" => Some(arch),
            _ => None,
        };
        for (key, value) in &self.match_labels {
            if label(key) != Some(value.as_str()) {
                return Ok(false);
            }
        }
        for e in &self.match_expressions {
            let have = label(&e.key);
            let holds = match e.operator.as_str() {
                "In" => have.is_some_and(|v| e.values.iter().any(|x| x == v)),
                "NotIn" => have.is_none_or(|v| !e.values.iter().any(|x| x == v)),
                "Exists" => have.is_some(),
                "DoesNotExist" => have.is_none(),
                other => return Err(format!("unknown selector operator {other:?}")),
            };
            if !holds {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Reads and parses a manifest file.
///
/// Errors: the file cannot be read or is not a manifest.
pub fn read(path: &Path) -> Result<Manifest, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    serde_saphyr::from_str(&text).map_err(|e| format!("parsing {}: {e}", path.display()))
}

/// Checks `path` with every rule. `archives` is the directory holding the archives the URIs
/// name (by file name); `None` skips the archive checks (digest, LICENSE, bin).
///
/// Errors: every rule broken, one message each.
pub fn validate(path: &Path, archives: Option<&Path>) -> Result<Manifest, Vec<String>> {
    let manifest = read(path).map_err(|e| vec![e])?;
    let mut problems = Vec::new();
    let stem = path
        .file_name()
        .and_then(|f| f.to_str())
        .and_then(|f| f.strip_suffix(".yaml"))
        .unwrap_or_default();
    check_manifest(&manifest, stem, &mut problems);
    if let Some(dir) = archives {
        for (i, platform) in manifest.spec.platforms.iter().enumerate() {
            if let Err(e) = check_archive(platform, dir) {
                problems.push(format!("platforms[{i}]: {e}"));
            }
        }
    }
    if problems.is_empty() {
        Ok(manifest)
    } else {
        Err(problems)
    }
}

/// The rules that need no archive; `file_stem` is the manifest's file name without `.yaml`.
pub fn check_manifest(m: &Manifest, file_stem: &str, problems: &mut Vec<String>) {
    if m.api_version != API_VERSION {
        problems.push(format!(
            "apiVersion is {:?}, want {API_VERSION}",
            m.api_version
        ));
    }
    if m.kind != "Plugin" {
        problems.push(format!("kind is {:?}, want Plugin", m.kind));
    }
    let name = &m.metadata.name;
    let valid_name = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !valid_name {
        problems.push(format!(
            "metadata.name {name:?} is not a plugin name (lowercase letters, digits and dashes)"
        ));
    }
    if WINDOWS_RESERVED.contains(&name.to_ascii_lowercase().as_str()) {
        problems.push(format!(
            "metadata.name {name:?} is a reserved name on Windows"
        ));
    }
    if name != file_stem {
        problems.push(format!(
            "metadata.name {name:?} does not match the file name {file_stem}.yaml"
        ));
    }
    let version = &m.spec.version;
    match version.strip_prefix('v') {
        Some(rest) if semver::Version::parse(rest).is_ok() => {}
        _ => problems.push(format!(
            "spec.version {version:?} is not a semantic version with a v prefix (vX.Y.Z)"
        )),
    }
    let short = m.spec.short_description.trim();
    if short.is_empty() {
        problems.push("spec.shortDescription is missing".to_owned());
    } else if short.contains('\n') {
        problems.push(format!(
            "spec.shortDescription must be one line, got {short:?}"
        ));
    } else if short.chars().count() > MAX_SHORT_DESCRIPTION {
        problems.push(format!(
            "krew warns: spec.shortDescription is longer than {MAX_SHORT_DESCRIPTION} \
             characters: {short:?}"
        ));
    }
    let texts = [
        ("description", Some(m.spec.description.as_str())),
        ("caveats", m.spec.caveats.as_deref()),
    ];
    for (field, text) in texts {
        for (n, line) in text.unwrap_or_default().lines().enumerate() {
            if line.chars().count() > MAX_LINE {
                problems.push(format!(
                    "krew warns: spec.{field} line {} is longer than {MAX_LINE} characters: \
                     {line:?}",
                    n + 1
                ));
            }
        }
    }
    if !(m.spec.homepage.starts_with("https://") || m.spec.homepage.starts_with("http://")) {
        problems.push(format!("spec.homepage {:?} is not a URL", m.spec.homepage));
    }
    if m.spec.platforms.is_empty() {
        problems.push("spec.platforms is empty".to_owned());
    }
    for (i, p) in m.spec.platforms.iter().enumerate() {
        check_platform(i, p, problems);
    }
    for (os, arch) in SUPPORTED_PLATFORMS {
        let matching: Vec<usize> = m
            .spec
            .platforms
            .iter()
            .enumerate()
            .filter(|(_, p)| p.selector.matches(os, arch).unwrap_or(false))
            .map(|(i, _)| i)
            .collect();
        if matching.len() > 1 {
            problems.push(format!(
                "platforms {matching:?} overlap: their selectors all match {os}/{arch}"
            ));
        }
    }
}

/// The platforms of `required` no entry of `m` matches, one message each.
pub fn missing_platforms(m: &Manifest, required: &[(&str, &str)]) -> Vec<String> {
    required
        .iter()
        .filter(|(os, arch)| {
            !m.spec
                .platforms
                .iter()
                .any(|p| p.selector.matches(os, arch).unwrap_or(false))
        })
        .map(|(os, arch)| format!("no platform entry for {os}/{arch}"))
        .collect()
}

fn check_platform(i: usize, p: &Platform, problems: &mut Vec<String>) {
    let at = format!("platforms[{i}]");
    if p.selector.is_empty() {
        problems.push(format!("{at}: the selector is empty"));
    }
    for key in p.selector.keys() {
        if key != "os" && key != "arch" {
            problems.push(format!("{at}: selector key {key:?} is not os or arch"));
        }
    }
    if let Err(e) = p.selector.matches("linux", "amd64") {
        problems.push(format!("{at}: {e}"));
    } else if !SUPPORTED_PLATFORMS
        .iter()
        .any(|(os, arch)| p.selector.matches(os, arch).unwrap_or(false))
    {
        problems.push(format!(
            "{at}: the selector matches no platform krew supports ({})",
            SUPPORTED_PLATFORMS
                .iter()
                .map(|(os, arch)| format!("{os}/{arch}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    if !(p.uri.ends_with(".tar.gz") || p.uri.ends_with(".zip")) {
        problems.push(format!(
            "{at}: uri {:?} is not a .tar.gz or .zip archive",
            p.uri
        ));
    }
    let hex = p.sha256.len() == 64
        && p.sha256
            .chars()
            .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
    if !hex {
        problems.push(format!(
            "{at}: sha256 {:?} is not 64 lowercase hex digits",
            p.sha256
        ));
    }
    if p.bin.is_empty() {
        problems.push(format!("{at}: bin is missing"));
    }
    let windows = SUPPORTED_PLATFORMS
        .iter()
        .any(|(os, arch)| *os == "windows" && p.selector.matches(os, arch).unwrap_or(false));
    if windows && !p.bin.ends_with(".exe") {
        problems.push(format!(
            "{at}: bin {:?} for windows must end in .exe",
            p.bin
        ));
    }
}

/// The sha256 of a file, lowercase hex.
///
/// Errors: the file cannot be read.
pub fn sha256_file(path: &Path) -> Result<String, String> {
    let mut file =
        std::fs::File::open(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The paths a `.tar.gz` holds, as `tar -tzf` lists them, without a leading `./`.
///
/// Errors: `tar` is not installed or fails.
pub fn archive_entries(path: &Path) -> Result<Vec<String>, String> {
    let out = Command::new("tar")
        .arg("-tzf")
        .arg(path)
        .output()
        .map_err(|e| format!("running tar (it must be installed): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "tar -tzf {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_start_matches("./").to_owned())
        .filter(|l| !l.is_empty())
        .collect())
}

/// What a file on disk holds, computed once per file as it is (path, length and modification
/// time): a test that validates one release against many broken manifests hashes and unpacks
/// its archives once, not once per manifest. `what` tells the computations apart.
///
/// Errors: those of `compute` (not remembered) or of reading the file's metadata.
fn once_per_file<T: Clone + Send + 'static>(
    path: &Path,
    what: &'static str,
    compute: impl FnOnce(&Path) -> Result<T, String>,
) -> Result<T, String> {
    type Key = (
        &'static str,
        std::path::PathBuf,
        u64,
        Option<std::time::SystemTime>,
    );
    type Seen = Vec<(Key, Box<dyn std::any::Any + Send>)>;
    static SEEN: std::sync::Mutex<Seen> = std::sync::Mutex::new(Vec::new());
    let meta = std::fs::metadata(path).map_err(|e| format!("opening {}: {e}", path.display()))?;
    let key: Key = (what, path.to_path_buf(), meta.len(), meta.modified().ok());
    let found = SEEN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, v)| v.downcast_ref::<T>().cloned());
    if let Some(value) = found {
        return Ok(value);
    }
    let value = compute(path)?;
    SEEN.lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((key, Box::new(value.clone())));
    Ok(value)
}

/// The archive checks of one platform: the archive its URI names exists in `dir`, its sha256
/// is the manifest's, it holds `bin`, and a license file anywhere in it (a name of
/// [`LICENSE_NAMES`], case-insensitively, as krew looks for one).
///
/// Errors: the first check that fails.
pub fn check_archive(p: &Platform, dir: &Path) -> Result<(), String> {
    let file = p.uri.rsplit('/').next().unwrap_or_default();
    let archive = dir.join(file);
    let digest = once_per_file(&archive, "sha256", sha256_file)?;
    if digest != p.sha256 {
        return Err(format!(
            "sha256 {} does not match the archive {file} ({digest})",
            p.sha256
        ));
    }
    let entries = once_per_file(&archive, "entries", archive_entries)?;
    let is_license = |entry: &str| {
        let base = entry
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or_default();
        LICENSE_NAMES.contains(&base.to_ascii_lowercase().as_str())
    };
    if !entries.iter().any(|e| is_license(e)) {
        return Err(format!(
            "the archive {file} has no LICENSE file (it holds {entries:?})"
        ));
    }
    if !entries.contains(&p.bin) {
        return Err(format!(
            "the archive {file} has no {} (it holds {entries:?})",
            p.bin
        ));
    }
    Ok(())
}

//! krew packaging: `scripts/release.sh` builds archives and a manifest that pass krew's
//! validation rules (`krew/validate.rs`), the validator refuses broken manifests, the committed
//! `krew/karpenter.yaml` is what the script generates for the workspace version, and the archive
//! installed the way krew installs it (unpacked into `<root>/store/<name>/<version>`, its bin
//! linked from `<root>/bin`, that directory on PATH) runs as `kubectl karpenter version` through
//! real kubectl. Needs bash, tar, gzip, sha256sum and kubectl (`$KUBECTL` or on PATH); a missing
//! tool fails the test with its name.

mod validate;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use validate::Manifest;

/// The plugin binary the archives package (the debug build; no release build in tests).
const BIN: &str = env!("CARGO_BIN_EXE_kubectl-karpenter");
const VERSION: &str = env!("CARGO_PKG_VERSION");

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// krew's name for this machine's platform (Go's GOOS/GOARCH).
fn host_platform() -> (&'static str, &'static str) {
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    (os, arch)
}

/// Runs `scripts/release.sh ARGS…` with the debug binary as the host's, `RELEASE_URL_BASE` set
/// or removed, and `DIST_DIR` as given.
fn release(args: &[&str], url_base: Option<&str>, dist: Option<&Path>) -> Output {
    let script = repo_root().join("scripts").join("release.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).arg("--binary").arg(BIN).args(args);
    match url_base {
        Some(base) => cmd.env("RELEASE_URL_BASE", base),
        None => cmd.env_remove("RELEASE_URL_BASE"),
    };
    match dist {
        Some(dir) => cmd.env("DIST_DIR", dir),
        None => cmd.env_remove("DIST_DIR"),
    };
    cmd.output().unwrap_or_else(|e| {
        panic!(
            "running bash {} (bash must be installed): {e}",
            script.display()
        )
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Runs the release script for the host alone into `out` and returns the validated manifest.
fn host_release(out: &Path, url_base: Option<&str>) -> Manifest {
    let out_str = out.to_str().expect("utf-8 path");
    let run = release(&["--host-only", VERSION, out_str], url_base, None);
    assert!(
        run.status.success(),
        "release.sh failed:\n{}",
        text(&run.stderr)
    );
    validate::validate(&out.join("karpenter.yaml"), Some(out))
        .unwrap_or_else(|problems| panic!("the generated manifest is invalid: {problems:#?}"))
}

fn kubectl() -> PathBuf {
    if let Some(path) = std::env::var_os("KUBECTL") {
        return PathBuf::from(path);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|p| p.is_file())
        .expect("kubectl is needed for the krew install test: put it on PATH or set KUBECTL")
}

/// Installs the platform of `manifest` matching this machine the way krew does: unpacks its
/// archive (from `archives`) into `<root>/store/<name>/<version>/` and links
/// `<root>/bin/kubectl-<name>` (dashes in the name become underscores) to the bin there.
/// Returns `<root>/bin`.
fn krew_install(manifest: &Manifest, archives: &Path, root: &Path) -> PathBuf {
    let (os, arch) = host_platform();
    let platform = manifest
        .spec
        .platforms
        .iter()
        .find(|p| p.selector.matches(os, arch).expect("valid selector"))
        .unwrap_or_else(|| panic!("no platform of the manifest matches {os}/{arch}"));
    let archive = archives.join(platform.uri.rsplit('/').next().expect("file name"));
    let store = root
        .join("store")
        .join(&manifest.metadata.name)
        .join(&manifest.spec.version);
    std::fs::create_dir_all(&store).expect("create the store directory");
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&store)
        .output()
        .expect("running tar (it must be installed)");
    assert!(untar.status.success(), "tar -x: {}", text(&untar.stderr));
    let bin = store.join(&platform.bin);
    assert!(bin.is_file(), "{} was not unpacked", bin.display());
    let bin_dir = root.join("bin");
    std::fs::create_dir_all(&bin_dir).expect("create bin");
    let link = bin_dir.join(format!(
        "kubectl-{}",
        manifest.metadata.name.replace('-', "_")
    ));
    std::os::unix::fs::symlink(&bin, &link).expect("link the plugin");
    bin_dir
}

#[test]
fn release_script_archives_install_like_krew_and_run_through_kubectl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let manifest = host_release(&out, Some("https://downloads.example/karpenter/"));
    let (os, arch) = host_platform();
    assert_eq!(manifest.metadata.name, "karpenter");
    assert_eq!(manifest.spec.version, format!("v{VERSION}"));
    assert_eq!(manifest.spec.platforms.len(), 1);
    let platform = &manifest.spec.platforms[0];
    let archive_name = format!("kubectl-karpenter_{VERSION}_{os}_{arch}.tar.gz");
    assert_eq!(
        platform.uri,
        format!("https://downloads.example/karpenter/{archive_name}")
    );
    assert_eq!(
        validate::sha256_file(&out.join(&archive_name)).expect("digest"),
        platform.sha256
    );
    let mut entries = validate::archive_entries(&out.join(&archive_name)).expect("list");
    entries.sort();
    assert_eq!(entries, ["LICENSE", "kubectl-karpenter"]);

    let root = dir.path().join("krew");
    let bin_dir = krew_install(&manifest, &out, &root);
    let kubectl = kubectl();
    // Only the krew bin directory and kubectl's own: the plugin found is the installed one.
    let kubectl_dir = kubectl.parent().expect("kubectl directory").to_path_buf();
    let path = std::env::join_paths([bin_dir.clone(), kubectl_dir]).expect("PATH");
    let run = |args: &[&str]| {
        Command::new(&kubectl)
            .args(args)
            .env("PATH", &path)
            .env("HOME", dir.path())
            .env_remove("KUBECONFIG")
            .output()
            .expect("run kubectl")
    };
    let plugins = run(&["plugin", "list"]);
    let listed = text(&plugins.stdout);
    assert!(
        listed.contains(&bin_dir.join("kubectl-karpenter").display().to_string()),
        "kubectl plugin list does not show the installed plugin:\n{listed}{}",
        text(&plugins.stderr)
    );
    let version = run(&["karpenter", "version"]);
    assert!(
        version.status.success(),
        "kubectl karpenter version: {}",
        text(&version.stderr)
    );
    let printed = text(&version.stdout);
    assert!(
        printed.starts_with(&format!("kubectl-karpenter {VERSION}")),
        "{printed}"
    );
    let json = run(&["karpenter", "version", "-o", "json"]);
    let value: Value = serde_json::from_slice(&json.stdout).expect("version -o json is JSON");
    assert_eq!(value["version"], json!(VERSION));
    assert_eq!(value["platform"], json!(format!("{os}/{arch}")));
}

#[test]
fn full_release_needs_every_platform_and_lists_all_four() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let out_str = out.to_str().expect("utf-8 path");
    let dist = dir.path().join("dist");
    let missing = release(&[VERSION, out_str], None, Some(&dist));
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing.stderr));
    let err = text(&missing.stderr);
    assert!(
        err.contains("release.sh: error: no binary for ") && err.contains("--host-only"),
        "{err}"
    );
    assert!(
        !out.join("karpenter.yaml").exists(),
        "nothing is written when a binary is missing"
    );

    // Stand-ins for the binaries built on the other platforms.
    let (os, arch) = host_platform();
    for platform in ["linux-amd64", "linux-arm64", "darwin-amd64", "darwin-arm64"] {
        if platform == format!("{os}-{arch}") {
            continue;
        }
        let target = dist.join(platform);
        std::fs::create_dir_all(&target).expect("mkdir");
        std::fs::write(
            target.join("kubectl-karpenter"),
            format!("{platform} build\n"),
        )
        .expect("write");
    }
    let run = release(&[&format!("v{VERSION}"), out_str], None, Some(&dist));
    assert!(run.status.success(), "{}", text(&run.stderr));
    let manifest = validate::validate(&out.join("karpenter.yaml"), Some(&out))
        .unwrap_or_else(|problems| panic!("invalid: {problems:#?}"));
    assert_eq!(
        validate::missing_platforms(&manifest, &validate::RELEASE_PLATFORMS),
        Vec::<String>::new()
    );
    let platforms: Vec<(String, String)> = manifest
        .spec
        .platforms
        .iter()
        .map(|p| {
            (
                p.selector.match_labels["os"].clone(),
                p.selector.match_labels["arch"].clone(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("linux", "amd64"),
        ("linux", "arm64"),
        ("darwin", "amd64"),
        ("darwin", "arm64"),
    ]
    .iter()
    .map(|(o, a)| (o.to_string(), a.to_string()))
    .collect();
    assert_eq!(platforms, want);
    for p in &manifest.spec.platforms {
        assert!(
            p.uri.starts_with(&format!(
                "https://github.com/karpenter-rs/karpenter-rs/releases/download/v{VERSION}/"
            )),
            "{}",
            p.uri
        );
    }

    // A version other than the workspace's is refused.
    let other = release(&["--host-only", "9.9.9", out_str], None, None);
    assert_eq!(other.status.code(), Some(1));
    assert!(
        text(&other.stderr).contains("is not the workspace version"),
        "{}",
        text(&other.stderr)
    );
    let bad = release(&["--host-only", "one", out_str], None, None);
    assert!(
        text(&bad.stderr).contains("is not a semantic version"),
        "{}",
        text(&bad.stderr)
    );
}

/// Writes `value` as `dir/<file>` and validates it against the archives in `archives`.
fn problems(value: &Value, dir: &Path, file: &str, archives: &Path) -> Vec<String> {
    let path = dir.join(file);
    std::fs::write(&path, serde_saphyr::to_string(value).expect("to YAML")).expect("write");
    match validate::validate(&path, Some(archives)) {
        Ok(_) => Vec::new(),
        Err(problems) => problems,
    }
}

#[test]
fn the_validator_rejects_broken_manifests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    host_release(&out, None);
    let good_text = std::fs::read_to_string(out.join("karpenter.yaml")).expect("read");
    let good: Value = serde_saphyr::from_str(&good_text).expect("manifest as a value");
    let cases = dir.path().join("cases");
    std::fs::create_dir_all(&cases).expect("mkdir");
    assert_eq!(
        problems(&good, &cases, "karpenter.yaml", &out),
        Vec::<String>::new()
    );

    let expect = |value: &Value, file: &str, want: &str| {
        let found = problems(value, &cases, file, &out);
        assert!(
            found.iter().any(|p| p.contains(want)),
            "expected a problem containing {want:?}, got {found:#?}"
        );
    };
    let with = |edit: &dyn Fn(&mut Value)| {
        let mut v = good.clone();
        edit(&mut v);
        v
    };

    expect(
        &good,
        "kubectl-karpenter.yaml",
        "does not match the file name",
    );
    expect(
        &with(&|v| v["metadata"]["name"] = json!("Karpenter")),
        "Karpenter.yaml",
        "is not a plugin name",
    );
    expect(
        &with(&|v| v["metadata"]["name"] = json!("nul")),
        "nul.yaml",
        "reserved name on Windows",
    );
    for version in ["0.1.0", "v1.2", "vnext", ""] {
        expect(
            &with(&|v| v["spec"]["version"] = json!(version)),
            "karpenter.yaml",
            "is not a semantic version with a v prefix",
        );
    }
    expect(
        &with(&|v| v["kind"] = json!("Deployment")),
        "karpenter.yaml",
        "kind is \"Deployment\"",
    );
    expect(
        &with(&|v| v["apiVersion"] = json!("krew.googlecontainertools.github.com/v1alpha1")),
        "karpenter.yaml",
        "apiVersion is",
    );
    expect(
        &with(&|v| v["spec"]["shortDescription"] = json!("")),
        "karpenter.yaml",
        "shortDescription is missing",
    );
    expect(
        &with(&|v| v["spec"]["shortDescription"] = json!("a\nb")),
        "karpenter.yaml",
        "must be one line",
    );
    // What krew only warns about.
    expect(
        &with(&|v| v["spec"]["shortDescription"] = json!("x".repeat(71))),
        "karpenter.yaml",
        "krew warns: spec.shortDescription is longer than 70 characters",
    );
    assert!(
        problems(
            &with(&|v| v["spec"]["shortDescription"] = json!("x".repeat(70))),
            &cases,
            "karpenter.yaml",
            &out
        )
        .is_empty()
    );
    expect(
        &with(&|v| v["spec"]["description"] = json!(format!("short\n{}\n", "y".repeat(81)))),
        "karpenter.yaml",
        "krew warns: spec.description line 2 is longer than 80 characters",
    );
    expect(
        &with(&|v| v["spec"]["caveats"] = json!("z".repeat(81))),
        "karpenter.yaml",
        "krew warns: spec.caveats line 1 is longer than 80 characters",
    );
    expect(
        &with(&|v| v["spec"]["homepage"] = json!("")),
        "karpenter.yaml",
        "spec.homepage",
    );
    expect(
        &with(&|v| v["spec"]["platforms"] = json!([])),
        "karpenter.yaml",
        "spec.platforms is empty",
    );

    // Overlapping selectors: the same platform twice, or an expression covering another.
    expect(
        &with(&|v| {
            let first = v["spec"]["platforms"][0].clone();
            v["spec"]["platforms"]
                .as_array_mut()
                .expect("platforms")
                .push(first);
        }),
        "karpenter.yaml",
        "overlap",
    );
    let (os, arch) = host_platform();
    expect(
        &with(&|v| {
            let mut other = v["spec"]["platforms"][0].clone();
            other["selector"] = json!({"matchExpressions": [
                {"key": "os", "operator": "In", "values": [os, "windows"]},
            ]});
            other["bin"] = json!("kubectl-karpenter.exe");
            v["spec"]["platforms"]
                .as_array_mut()
                .expect("platforms")
                .push(other);
        }),
        "karpenter.yaml",
        &format!("overlap: their selectors all match {os}/{arch}"),
    );
    expect(
        &with(&|v| v["spec"]["platforms"][0]["selector"] = json!({})),
        "karpenter.yaml",
        "the selector is empty",
    );
    expect(
        &with(&|v| v["spec"]["platforms"][0]["selector"]["matchLabels"]["distro"] = json!("x")),
        "karpenter.yaml",
        "selector key \"distro\" is not os or arch",
    );
    expect(
        &with(&|v| {
            v["spec"]["platforms"][0]["selector"] =
                json!({"matchLabels": {"os": "windows", "arch": "amd64"}})
        }),
        "karpenter.yaml",
        "for windows must end in .exe",
    );
    // Selectors that match no platform krew supports.
    for (os, arch) in [
        ("plan9", "amd64"),
        ("windows", "arm"),
        ("darwin", "ppc64le"),
    ] {
        expect(
            &with(&|v| {
                v["spec"]["platforms"][0]["selector"] =
                    json!({"matchLabels": {"os": os, "arch": arch}})
            }),
            "karpenter.yaml",
            "platforms[0]: the selector matches no platform krew supports",
        );
    }
    // A host-only manifest is valid for krew but not a release of ours.
    let host_only = validate::validate(&out.join("karpenter.yaml"), Some(&out)).expect("valid");
    let missing = validate::missing_platforms(&host_only, &validate::RELEASE_PLATFORMS);
    assert_eq!(missing.len(), 3, "{missing:?}");
    assert!(!missing.contains(&format!("no platform entry for {os}/{arch}")));

    // Digests and archives.
    expect(
        &with(&|v| v["spec"]["platforms"][0]["sha256"] = json!("0".repeat(64))),
        "karpenter.yaml",
        "does not match the archive",
    );
    let upper = good["spec"]["platforms"][0]["sha256"]
        .as_str()
        .expect("sha256")
        .to_uppercase();
    expect(
        &with(&|v| v["spec"]["platforms"][0]["sha256"] = json!(upper)),
        "karpenter.yaml",
        "is not 64 lowercase hex digits",
    );
    expect(
        &with(&|v| v["spec"]["platforms"][0]["uri"] = json!("https://x.example/kubectl-karpenter")),
        "karpenter.yaml",
        "is not a .tar.gz or .zip archive",
    );
    expect(
        &with(&|v| v["spec"]["platforms"][0]["bin"] = json!("kubectl-other")),
        "karpenter.yaml",
        "has no kubectl-other",
    );

    // An archive without LICENSE, with a manifest whose digest is right for it.
    let stage = dir.path().join("stage");
    std::fs::create_dir_all(&stage).expect("mkdir");
    std::fs::copy(BIN, stage.join("kubectl-karpenter")).expect("copy");
    let bare = out.join("bare.tar.gz");
    let tar = Command::new("tar")
        .arg("-czf")
        .arg(&bare)
        .arg("-C")
        .arg(&stage)
        .arg("kubectl-karpenter")
        .output()
        .expect("running tar (it must be installed)");
    assert!(tar.status.success(), "{}", text(&tar.stderr));
    let digest = validate::sha256_file(&bare).expect("digest");
    expect(
        &with(&|v| {
            v["spec"]["platforms"][0]["uri"] = json!("https://x.example/bare.tar.gz");
            v["spec"]["platforms"][0]["sha256"] = json!(digest);
        }),
        "karpenter.yaml",
        "has no LICENSE file",
    );

    // krew takes a license under any of its names, in any case, anywhere in the archive.
    std::fs::create_dir_all(stage.join("docs")).expect("mkdir");
    std::fs::write(stage.join("docs").join("Copying.TXT"), "license text\n").expect("write");
    let nested = out.join("nested.tar.gz");
    let tar = Command::new("tar")
        .arg("-czf")
        .arg(&nested)
        .arg("-C")
        .arg(&stage)
        .arg("kubectl-karpenter")
        .arg("docs/Copying.TXT")
        .output()
        .expect("running tar (it must be installed)");
    assert!(tar.status.success(), "{}", text(&tar.stderr));
    let digest = validate::sha256_file(&nested).expect("digest");
    let found = problems(
        &with(&|v| {
            v["spec"]["platforms"][0]["uri"] = json!("https://x.example/nested.tar.gz");
            v["spec"]["platforms"][0]["sha256"] = json!(digest);
        }),
        &cases,
        "karpenter.yaml",
        &out,
    );
    assert_eq!(found, Vec::<String>::new());
}

#[test]
fn the_template_renders_safely_and_no_manifest_is_committed() {
    // The manifest is generated at release time from the four builds, never committed from a
    // local build.
    assert!(
        !repo_root().join("krew").join("karpenter.yaml").exists(),
        "krew/karpenter.yaml must not be committed: scripts/release.sh writes it at release"
    );
    // `&` in RELEASE_URL_BASE stays literal (bash 5.2 patsub_replacement), and `${KREW_ROOT…}`
    // in the caveats is left for the user's shell.
    let dir = tempfile::tempdir().expect("tempdir");
    let base = "https://dl.example/kubectl-karpenter?a=1&b=2";
    let manifest = host_release(dir.path(), Some(base));
    let (os, arch) = host_platform();
    assert_eq!(
        manifest.spec.platforms[0].uri,
        format!("{base}/kubectl-karpenter_{VERSION}_{os}_{arch}.tar.gz")
    );
    assert_eq!(manifest.spec.version, format!("v{VERSION}"));
    let caveats = manifest.spec.caveats.as_deref().unwrap_or_default();
    assert!(
        caveats.contains("\"${KREW_ROOT:-$HOME/.krew}/bin/kubectl_complete-karpenter\""),
        "{caveats}"
    );
    let text = std::fs::read_to_string(dir.path().join("karpenter.yaml")).expect("read");
    assert!(
        !text.contains("${VERSION}") && !text.contains("${PLATFORMS}"),
        "{text}"
    );
    assert!(
        text.starts_with(&format!(
            "# Generated by scripts/release.sh for v{VERSION} ({os}/{arch}); do not edit.\n"
        )),
        "{text}"
    );
}

#[test]
fn the_release_script_refuses_a_tar_that_is_not_gnu_tar() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let fake = dir.path().join("bin");
    std::fs::create_dir_all(&fake).expect("mkdir");
    // bsdtar, as macOS ships it, under both names the script looks for.
    for name in ["tar", "gtar"] {
        let path = fake.join(name);
        std::fs::write(&path, "#!/bin/sh\necho 'bsdtar 3.5.3 - libarchive 3.5.3'\n")
            .expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![fake];
    dirs.extend(std::env::split_paths(&path));
    let out = Command::new("bash")
        .arg(repo_root().join("scripts").join("release.sh"))
        .args(["--binary", BIN, "--host-only", VERSION])
        .arg(dir.path().join("out"))
        .env("PATH", std::env::join_paths(dirs).expect("PATH"))
        .output()
        .expect("running bash (it must be installed)");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("release.sh: error: needs GNU tar (as tar or gtar)")
            && err.contains("the tar found is not GNU tar"),
        "{err}"
    );
    assert!(!dir.path().join("out").join("karpenter.yaml").exists());
}

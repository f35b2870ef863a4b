//! `kubectl karpenter version`: the plugin's version (the workspace's Cargo version), the git
//! commit when the build recorded one, and the platform (os/arch) it was built for; never
//! contacts the cluster.

use std::io::Write;

use clap::ValueEnum;
use serde::Serialize;

use crate::output::{self, OutputError};

/// `version -o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum VersionOutput {
    /// `kubectl-karpenter VERSION [(commit SHA)]`.
    Text,
    /// A JSON object.
    Json,
    /// The same object as YAML.
    Yaml,
}

/// What `version -o json|yaml` prints.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionInfo {
    /// The binary's name, always `kubectl-karpenter`.
    pub name: &'static str,
    /// The crate version, e.g. `0.1.0` (krew's manifest carries it as `v0.1.0`).
    pub version: &'static str,
    /// The commit it was built from: `KUBECTL_KARPENTER_GIT_COMMIT` at build time, else `None`.
    pub git_commit: Option<&'static str>,
    /// The operating system and architecture it was built for, e.g. `linux/amd64`, spelled as
    /// krew's platform selectors spell them.
    pub platform: String,
}

impl VersionInfo {
    /// This build's version.
    pub fn current() -> VersionInfo {
        VersionInfo {
            name: "kubectl-karpenter",
            version: env!("CARGO_PKG_VERSION"),
            git_commit: option_env!("KUBECTL_KARPENTER_GIT_COMMIT").filter(|c| !c.is_empty()),
            platform: format!("{}/{}", krew_os(), krew_arch()),
        }
    }
}

/// Go's GOOS for this build (krew selects platforms by it).
fn krew_os() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        other => other,
    }
}

/// Go's GOARCH for this build.
fn krew_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        other => other,
    }
}

/// Writes `info` as `format` asks: text is `kubectl-karpenter VERSION` and ` (commit SHA)` when
/// known, one line, like `--version` prints it.
///
/// Errors: writing or serializing failed.
pub fn write(
    info: &VersionInfo,
    format: VersionOutput,
    out: &mut impl Write,
) -> Result<(), OutputError> {
    match format {
        VersionOutput::Text => {
            write!(out, "{} {}", info.name, info.version)?;
            if let Some(commit) = info.git_commit {
                write!(out, " (commit {commit})")?;
            }
            writeln!(out)?;
        }
        VersionOutput::Json => output::write_json_value(out, info)?,
        VersionOutput::Yaml => output::write_yaml_value(out, info)?,
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(info: &VersionInfo, format: VersionOutput) -> String {
        let mut out = Vec::new();
        write(info, format, &mut out).expect("write");
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn text_json_and_yaml() {
        let mut info = VersionInfo {
            name: "kubectl-karpenter",
            version: "1.2.3",
            git_commit: None,
            platform: "linux/amd64".to_owned(),
        };
        assert_eq!(
            render(&info, VersionOutput::Text),
            "kubectl-karpenter 1.2.3\n"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render(&info, VersionOutput::Json)).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "name": "kubectl-karpenter",
                "version": "1.2.3",
                "gitCommit": null,
                "platform": "linux/amd64",
            })
        );
        info.git_commit = Some("abc1234");
        assert_eq!(
            render(&info, VersionOutput::Text),
            "kubectl-karpenter 1.2.3 (commit abc1234)\n"
        );
        let yaml = render(&info, VersionOutput::Yaml);
        assert!(yaml.contains("gitCommit: abc1234"), "{yaml}");
    }

    #[test]
    fn current_is_the_crate_version() {
        let info = VersionInfo::current();
        assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
        assert!(info.platform.contains('/'), "{}", info.platform);
    }
}

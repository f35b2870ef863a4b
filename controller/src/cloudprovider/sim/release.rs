//! New EKS-optimized image releases in the simulated cloud: what moves an `@latest` AMI alias
//! (upstream resolves aliases through SSM parameters that AWS updates on every release), so AMI
//! drift can be demonstrated and tested without AWS. A release can be published broken, so an
//! upgrade to a bad image can be tested too.

use super::images::{ARCHITECTURES, FAMILIES, architectures, version_date, version_of};
use super::network::{SimAmi, SimNetwork};

/// The version a family's first release gets when it has none yet.
const FIRST_VERSION: &str = "v20260101";

/// Whether instances booted from a release's images come up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ImageHealth {
    /// Instances boot and their kubelet registers a Node.
    #[default]
    Healthy,
    /// Instances run (EC2 lists them, they can be terminated) but their kubelet never starts, so
    /// no Node registers and NodeClaims launched from the image stay Launched, never Registered:
    /// what a bad AMI does to an upgrade.
    Broken,
}

impl ImageHealth {
    /// [`ImageHealth::Broken`] when `broken`, else [`ImageHealth::Healthy`].
    pub fn broken_if(broken: bool) -> ImageHealth {
        if broken {
            ImageHealth::Broken
        } else {
            ImageHealth::Healthy
        }
    }
}

/// Why a release was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// The family is not one the simulated cloud publishes.
    #[error(
        "unknown AMI family {0:?} (supported: al2023, al2, bottlerocket, windows2019, \
         windows2022, windows2025)"
    )]
    UnknownFamily(String),
    /// The architecture is not `amd64` or `arm64`.
    #[error("unknown architecture {0:?} (supported: amd64, arm64)")]
    UnknownArchitecture(String),
    /// The family has no images for this architecture (Windows: amd64 only).
    #[error("{family} images are published for {} only, not {arch}", architectures(family).join(", "))]
    UnsupportedArchitecture {
        /// Alias family, e.g. `windows2022`.
        family: String,
        /// The architecture asked for, e.g. `arm64`.
        arch: String,
    },
    /// The version is not `v` followed by a date.
    #[error("invalid version {0:?}: expected v followed by a date (vYYYYMMDD), e.g. v20260401")]
    InvalidVersion(String),
    /// An image of this family, version and architecture exists already.
    #[error("{family}@{version} is already published for {arch} as {id}")]
    AlreadyPublished {
        /// Alias family, e.g. `al2023`.
        family: String,
        /// Release version, `vYYYYMMDD`.
        version: String,
        /// `amd64` or `arm64`.
        arch: String,
        /// Id of the image already published, e.g. `ami-0000000000a310000`.
        id: String,
    },
}

impl PublishError {
    /// A CamelCase reason for status conditions, e.g. `AlreadyPublished`.
    pub fn reason(&self) -> &'static str {
        match self {
            PublishError::UnknownFamily(_) => "UnknownFamily",
            PublishError::UnknownArchitecture(_) => "UnknownArchitecture",
            PublishError::UnsupportedArchitecture { .. } => "UnsupportedArchitecture",
            PublishError::InvalidVersion(_) => "InvalidVersion",
            PublishError::AlreadyPublished { .. } => "AlreadyPublished",
        }
    }
}

impl SimNetwork {
    /// The version a new release of `family` gets when none is asked for: the day after the
    /// family's newest release (any architecture), so it becomes `@latest`.
    pub fn next_ami_version(&self, family: &str) -> String {
        self.amis
            .iter()
            .filter(|a| a.family == family)
            .filter_map(|a| version_date(&a.version))
            .max()
            .and_then(|d| d.tomorrow().ok())
            .map_or_else(|| FIRST_VERSION.to_string(), version_of)
    }

    /// Publish a release of `family`: one image per architecture in `architectures` (empty:
    /// every architecture the family is published for, see [`architectures`]), at `version` or, without one, [`SimNetwork::next_ami_version`]. Nothing is
    /// published unless every image can be.
    ///
    /// Errors: an unknown family or architecture, an architecture the family has no images
    /// for (arm64 for Windows), a version that is not `vYYYYMMDD`, or an
    /// image of that family, version and architecture that exists already.
    pub fn publish_release(
        &mut self,
        family: &str,
        version: Option<&str>,
        architectures: &[&str],
    ) -> Result<Vec<SimAmi>, PublishError> {
        if !FAMILIES.contains(&family) {
            return Err(PublishError::UnknownFamily(family.to_string()));
        }
        let published_for = self::architectures(family);
        let mut archs: Vec<&str> = if architectures.is_empty() {
            published_for.to_vec()
        } else {
            architectures.to_vec()
        };
        archs.sort_unstable();
        archs.dedup();
        if let Some(bad) = archs.iter().find(|a| !ARCHITECTURES.contains(a)) {
            return Err(PublishError::UnknownArchitecture(bad.to_string()));
        }
        if let Some(bad) = archs.iter().find(|a| !published_for.contains(a)) {
            return Err(PublishError::UnsupportedArchitecture {
                family: family.to_string(),
                arch: bad.to_string(),
            });
        }
        let version = match version {
            Some(v) if version_date(v).is_some() => v.to_string(),
            Some(v) => return Err(PublishError::InvalidVersion(v.to_string())),
            None => self.next_ami_version(family),
        };
        for arch in &archs {
            if let Some(existing) = self
                .amis
                .iter()
                .find(|a| a.family == family && a.version == version && a.arch == *arch)
            {
                return Err(PublishError::AlreadyPublished {
                    family: family.to_string(),
                    version,
                    arch: arch.to_string(),
                    id: existing.id.clone(),
                });
            }
        }
        Ok(archs
            .into_iter()
            .map(|arch| self.publish_ami(family, &version, arch))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_version_is_the_day_after_the_newest_release() {
        let mut net = SimNetwork::new("demo");
        assert_eq!(net.next_ami_version("al2023"), "v20260302");
        net.publish_ami("al2023", "v20260331", "arm64");
        assert_eq!(net.next_ami_version("al2023"), "v20260401");
        assert_eq!(net.next_ami_version("al2"), "v20260302");
        net.amis.clear();
        assert_eq!(net.next_ami_version("al2023"), FIRST_VERSION);
    }

    #[test]
    fn a_release_publishes_every_architecture_once() {
        let mut net = SimNetwork::new("demo");
        let before = net.amis.len();
        let amis = net
            .publish_release("bottlerocket", None, &[])
            .expect("publishes");
        let archs: Vec<&str> = amis.iter().map(|a| a.arch.as_str()).collect();
        assert_eq!(archs, ["amd64", "arm64"]);
        assert!(amis.iter().all(|a| a.version == "v20260302"));
        assert!(amis[0].name.contains("x86_64") && amis[1].name.contains("arm64"));
        assert_ne!(amis[0].id, amis[1].id);
        assert_eq!(net.amis.len(), before + 2);
        let one = net
            .publish_release("al2", Some("v20261231"), &["arm64", "arm64"])
            .expect("publishes");
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].version, "v20261231");
    }

    #[test]
    fn a_windows_release_is_amd64_only() {
        let mut net = SimNetwork::new("demo");
        assert_eq!(net.next_ami_version("windows2019"), "v20260302");
        let amis = net
            .publish_release("windows2019", None, &[])
            .expect("publishes");
        assert_eq!(amis.len(), 1);
        assert_eq!(amis[0].arch, "amd64");
        assert!(
            amis[0].name.starts_with("Windows_Server-2019-"),
            "{}",
            amis[0].name
        );
        let refused = net
            .publish_release("windows2025", None, &["amd64", "arm64"])
            .expect_err("no arm64 Windows images");
        assert_eq!(refused.reason(), "UnsupportedArchitecture");
        assert_eq!(
            refused.to_string(),
            "windows2025 images are published for amd64 only, not arm64"
        );
    }

    #[test]
    fn bad_or_repeated_releases_are_refused_whole() {
        let mut net = SimNetwork::new("demo");
        let before = net.amis.len();
        let err = |r: Result<Vec<SimAmi>, PublishError>| r.expect_err("refused").reason();
        assert_eq!(
            err(net.publish_release("ubuntu", None, &[])),
            "UnknownFamily"
        );
        assert_eq!(
            err(net.publish_release("al2023", None, &["x86_64"])),
            "UnknownArchitecture"
        );
        for bad in ["20260401", "v2026041", "v20261301", "latest"] {
            assert_eq!(
                err(net.publish_release("al2023", Some(bad), &[])),
                "InvalidVersion",
                "{bad}"
            );
        }
        net.publish_ami("al2023", "v20260401", "arm64");
        let refused = net
            .publish_release("al2023", Some("v20260401"), &[])
            .expect_err("arm64 exists");
        assert!(
            matches!(&refused, PublishError::AlreadyPublished { arch, .. } if arch == "arm64"),
            "{refused}"
        );
        assert_eq!(net.amis.len(), before + 1, "nothing else was published");
    }
}

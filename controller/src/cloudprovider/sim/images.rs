//! The simulated image catalog: which EKS-optimized AMI families the simulated cloud publishes,
//! for which architectures and under which image names, and the release history a new account
//! starts with, so an alias pinned to a past release (`al2023@v20240625`, as upstream's
//! examples pin it) resolves as it does on AWS, and a cautious user can pin, then step forward.

use std::collections::BTreeMap;

use jiff::civil::Date;

use super::network::{SimAmi, SimNetwork};

/// AMI alias families the simulated cloud publishes images for (all of upstream's alias
/// families).
pub const FAMILIES: [&str; 6] = [
    "al2023",
    "al2",
    "bottlerocket",
    "windows2019",
    "windows2022",
    "windows2025",
];

/// Architectures an image can be published for.
pub const ARCHITECTURES: [&str; 2] = ["amd64", "arm64"];

/// The releases every account has had from the start, oldest first. Their images are
/// published first, so their ids are the ones earlier versions of the simulated cloud gave
/// them.
const CURRENT_RELEASES: [&str; 2] = ["v20260101", "v20260301"];

/// The first and last month of the release history before [`CURRENT_RELEASES`]: one release
/// a month, on the 25th (so `al2023@v20240625` is one of them).
const HISTORY_MONTHS: ((i16, i8), (i16, i8)) = ((2024, 1), (2025, 12));

/// Day of the month history releases are dated.
const HISTORY_DAY: i8 = 25;

/// The Kubernetes minor version images are built for (in their names).
const KUBERNETES_MINOR: &str = "1.32";

/// Whether `family` is a Windows Server family.
pub fn is_windows(family: &str) -> bool {
    family.starts_with("windows")
}

/// The architectures `family` is published for: Windows images only for amd64 (AWS publishes
/// no arm64 EKS-optimized Windows AMI, and upstream's Windows families only resolve amd64).
pub fn architectures(family: &str) -> &'static [&'static str] {
    if is_windows(family) {
        &ARCHITECTURES[..1]
    } else {
        &ARCHITECTURES
    }
}

/// The date of a `vYYYYMMDD` release version.
pub fn version_date(version: &str) -> Option<Date> {
    let digits = version.strip_prefix('v')?;
    if digits.len() != 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let year: i16 = digits[0..4].parse().ok()?;
    let month: i8 = digits[4..6].parse().ok()?;
    let day: i8 = digits[6..8].parse().ok()?;
    Date::new(year, month, day).ok()
}

/// The `vYYYYMMDD` version of a release dated `date`.
pub fn version_of(date: Date) -> String {
    format!("v{:04}{:02}{:02}", date.year(), date.month(), date.day())
}

/// Every release version a new account has, oldest first: the monthly history, then
/// [`CURRENT_RELEASES`].
pub fn release_history() -> Vec<String> {
    let ((first_year, first_month), (last_year, last_month)) = HISTORY_MONTHS;
    let mut versions = Vec::new();
    for year in first_year..=last_year {
        for month in 1..=12 {
            let after_first = (year, month) >= (first_year, first_month);
            let before_last = (year, month) <= (last_year, last_month);
            if after_first && before_last {
                versions.extend(Date::new(year, month, HISTORY_DAY).ok().map(version_of));
            }
        }
    }
    versions.extend(CURRENT_RELEASES.map(String::from));
    versions
}

/// The image name AWS gives a release of `family` for `arch`, e.g.
/// `amazon-eks-node-al2023-x86_64-standard-1.32-v20260301` or
/// `Windows_Server-2022-English-Core-EKS_Optimized-1.32-2026.03.01`.
pub fn image_name(family: &str, version: &str, arch: &str) -> String {
    if let (Some(year), Some(date)) = (family.strip_prefix("windows"), version_date(version)) {
        return format!(
            "Windows_Server-{year}-English-Core-EKS_Optimized-{KUBERNETES_MINOR}-{}",
            date.strftime("%Y.%m.%d")
        );
    }
    let machine = if arch == "arm64" { "arm64" } else { "x86_64" };
    format!("amazon-eks-node-{family}-{machine}-standard-{KUBERNETES_MINOR}-{version}")
}

impl SimNetwork {
    /// Publish one image (what a new EKS-optimized AMI does to `@latest`), without checks:
    /// [`SimNetwork::publish_release`] is the checked way.
    pub fn publish_ami(&mut self, family: &str, version: &str, arch: &str) -> SimAmi {
        let n = self.amis.len() as u64;
        let ami = SimAmi {
            id: format!("ami-0{:016x}", 0xa31_0000u64 + n),
            name: image_name(family, version, arch),
            family: family.into(),
            version: version.into(),
            arch: arch.into(),
            owner: "amazon".into(),
            deprecated: false,
            tags: BTreeMap::new(),
        };
        self.amis.push(ami.clone());
        ami
    }

    /// Publish every family's [`release_history`] for each of its architectures, leaving the
    /// catalog oldest first. The Linux families' [`CURRENT_RELEASES`] go first so their images
    /// keep the ids they always had.
    pub(super) fn publish_release_history(&mut self) {
        let linux = ["al2023", "al2", "bottlerocket"];
        for version in CURRENT_RELEASES {
            for family in linux {
                for arch in architectures(family) {
                    self.publish_ami(family, version, arch);
                }
            }
        }
        for version in release_history() {
            for family in FAMILIES {
                let published_first =
                    linux.contains(&family) && CURRENT_RELEASES.contains(&version.as_str());
                if published_first {
                    continue;
                }
                for arch in architectures(family) {
                    self.publish_ami(family, &version, arch);
                }
            }
        }
        self.amis.sort_by(|a, b| a.version.cmp(&b.version));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_is_monthly_and_ends_at_the_current_releases() {
        let history = release_history();
        assert_eq!(history.len(), 24 + 2);
        assert_eq!(history[0], "v20240125");
        assert!(history.contains(&"v20240625".to_string()));
        assert_eq!(
            history[history.len() - 3..],
            ["v20251225", "v20260101", "v20260301"]
        );
        assert!(history.windows(2).all(|w| w[0] < w[1]), "oldest first");
    }

    #[test]
    fn every_family_has_its_history_and_the_current_ids_stay() {
        let net = SimNetwork::new("demo");
        for family in FAMILIES {
            let archs: Vec<&str> = net
                .amis
                .iter()
                .filter(|a| a.family == family && a.version == "v20240625")
                .map(|a| a.arch.as_str())
                .collect();
            assert_eq!(archs, architectures(family), "{family}");
        }
        assert!(net.amis.windows(2).all(|w| w[0].version <= w[1].version));
        let current = |version: &str, family: &str, arch: &str| {
            net.amis
                .iter()
                .find(|a| a.version == version && a.family == family && a.arch == arch)
                .map(|a| a.id.clone())
        };
        // The ids the catalog gave these images before it had a history.
        assert_eq!(
            current("v20260101", "al2023", "amd64").as_deref(),
            Some("ami-0000000000a310000")
        );
        assert_eq!(
            current("v20260301", "bottlerocket", "arm64").as_deref(),
            Some("ami-0000000000a31000b")
        );
        let mut ids: Vec<&str> = net.amis.iter().map(|a| a.id.as_str()).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), net.amis.len(), "ids are unique");
    }

    #[test]
    fn windows_images_are_amd64_and_named_as_aws_names_them() {
        assert_eq!(architectures("windows2025"), ["amd64"]);
        assert_eq!(architectures("bottlerocket"), ["amd64", "arm64"]);
        assert_eq!(
            image_name("windows2022", "v20260301", "amd64"),
            "Windows_Server-2022-English-Core-EKS_Optimized-1.32-2026.03.01"
        );
        assert_eq!(
            image_name("al2", "v20240625", "arm64"),
            "amazon-eks-node-al2-arm64-standard-1.32-v20240625"
        );
    }
}

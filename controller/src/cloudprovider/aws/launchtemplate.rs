//! Launch templates (upstream `aws:pkg/providers/launchtemplate`): what an instance boots with
//! (image, user data with the node's labels and taints, security groups, instance profile,
//! block devices, metadata options), named by a hash of that content so NodeClaims that boot
//! the same way share one template, and tagged with the cluster and node class so they are
//! deleted when their node class goes.
//!
//! User data follows each AMI family's bootstrap contract:
//! - AL2023: a MIME multi-part document with a nodeadm `NodeConfig` (`node.eks.aws/v1alpha1`),
//!   kubelet flags `--node-labels` and `--register-with-taints`; the node class's own userData
//!   is appended as a further part;
//! - AL2: a shell script calling `/etc/eks/bootstrap.sh` with `--kubelet-extra-args`;
//! - Bottlerocket: TOML `[settings.kubernetes]` with `node-labels` and `node-taints` tables;
//! - Windows: a `<powershell>` block running the image's `Start-EKSBootstrap.ps1` with the
//!   same kubelet flags as AL2 in `-KubeletExtraArgs`, the node class's userData first;
//! - Custom: the node class's userData as is.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use base64::Engine as _;
use crds::ec2nodeclass::{
    AmiFamily, EC2NodeClassSpec, HttpTokens, InstanceStorePolicy, InterfaceType,
    KubeletConfiguration, Toggle,
};
use crds::{EC2NodeClass, NodeClaim};
use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::cloudprovider::sim::network::DISCOVERY_TAG;
use ec2api::{
    BlockDevice, ConnectionTracking, LaunchTemplateData, MetadataOptions, NetworkInterface,
    Placement, PlacementGroupInfo,
};

/// Tag key on launch templates naming the cluster they belong to.
pub const CLUSTER_TAG: &str = "karpenter.k8s.aws/cluster";
/// Prefix of launch template names (upstream: `karpenter.k8s.aws/<hash>`).
pub const NAME_PREFIX: &str = "karpenter.k8s.aws/";
const MIME_BOUNDARY: &str = "//";

/// What the node's kubelet needs to join the cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClusterInfo {
    /// The cluster's name (`CLUSTER_NAME`), as nodeadm, the AL2 bootstrap script and
    /// Bottlerocket's `cluster-name` setting expect it.
    pub name: String,
    /// The API server URL nodes join, e.g. `https://ABCD.gr7.us-east-1.eks.amazonaws.com`.
    pub endpoint: String,
    /// Cluster CA bundle, base64 (empty when unknown).
    pub ca_bundle: String,
    /// The cluster's service CIDR, IPv4 (`172.20.0.0/16`) or IPv6 (`fd30:1c53:5f8a::/108`), as
    /// EKS DescribeCluster reports it; `None` until discovered (never guessed: an AL2023 node
    /// class is not Ready without it, as upstream's `ClusterCIDRResolutionFailed`).
    pub service_cidr: Option<String>,
    /// The cluster's IP family as EKS DescribeCluster reports it (`kubernetesNetworkConfig.
    /// ipFamily`: `ipv4` or `ipv6`); `None` until discovered.
    pub ip_family: Option<String>,
    /// The `kube-dns` Service's cluster IP in `kube-system`, as the controller read it at start
    /// (upstream `operator.KubeDNSIP`); `None` when there is no such Service.
    pub kube_dns_ip: Option<String>,
}

impl ClusterInfo {
    /// Whether the cluster is IPv6: DescribeCluster says so, or its kube-dns address or service
    /// CIDR is IPv6 (upstream decides by the kube-dns address's family).
    pub fn ipv6(&self) -> bool {
        self.ip_family.as_deref() == Some("ipv6")
            || [&self.kube_dns_ip, &self.service_cidr]
                .iter()
                .any(|v| v.as_deref().is_some_and(|c| c.contains(':')))
    }

    /// The cluster DNS address nodes use: the kube-dns Service's cluster IP where it was read,
    /// else the one the service CIDR implies as EKS assigns it to kube-dns: the tenth address
    /// (`172.20.0.10`), or `::a` in an IPv6 range (`fd30:1c53:5f8a::a`). `None` with neither,
    /// or when the CIDR does not parse.
    pub fn dns_ip(&self) -> Option<String> {
        if let Some(ip) = &self.kube_dns_ip {
            return Some(ip.clone());
        }
        let cidr = self.service_cidr.as_deref()?;
        let (base, _) = cidr.split_once('/')?;
        match base.parse::<std::net::IpAddr>().ok()? {
            std::net::IpAddr::V4(v4) => {
                Some(std::net::Ipv4Addr::from(u32::from(v4).wrapping_add(10)).to_string())
            }
            std::net::IpAddr::V6(v6) => {
                Some(std::net::Ipv6Addr::from(u128::from(v6).wrapping_add(10)).to_string())
            }
        }
    }
}

/// The cluster DNS address a node's kubelet uses: the node class's `kubelet.clusterDNS` first
/// entry, else the one the cluster's service CIDR implies ([`ClusterInfo::dns_ip`]).
fn cluster_dns(kubelet: Option<&KubeletConfiguration>, cluster: &ClusterInfo) -> Option<String> {
    kubelet
        .and_then(|k| k.cluster_dns.first().cloned())
        .or_else(|| cluster.dns_ip())
}

/// The bootstrap.sh flags after `--kubelet-extra-args` (AL2, upstream `eksbootstrap.go`): the
/// cluster DNS address, an IPv6 cluster's IP family and service CIDR, and the instance-store
/// RAID0 array; each on a continued line.
fn al2_network_flags(
    kubelet: Option<&KubeletConfiguration>,
    cluster: &ClusterInfo,
    raid0: bool,
) -> String {
    let mut flags = String::new();
    if let Some(dns) = cluster_dns(kubelet, cluster) {
        let _ = write!(flags, " \\\n  --dns-cluster-ip '{dns}'");
    }
    if cluster.ipv6() {
        flags.push_str(" \\\n  --ip-family ipv6");
        if let Some(cidr) = cluster.service_cidr.as_deref().filter(|c| c.contains(':')) {
            let _ = write!(flags, " --service-ipv6-cidr '{cidr}'");
        }
    }
    if raid0 {
        flags.push_str(" \\\n  --local-disks raid0");
    }
    flags
}

/// Labels and taints the kubelet registers with: the NodeClaim's labels (NodePool, template
/// labels, single-valued requirements), its taints and startup taints, and
/// `karpenter.sh/unregistered:NoExecute`.
pub fn node_identity(claim: &NodeClaim) -> (BTreeMap<String, String>, Vec<Taint>) {
    let labels = claim.metadata.labels.clone().unwrap_or_default();
    let mut taints = claim.spec.taints.clone();
    taints.extend(claim.spec.startup_taints.iter().cloned());
    taints.push(crds::labels::unregistered_no_execute_taint());
    (labels, taints)
}

fn taint_flag(t: &Taint) -> String {
    match t.value.as_deref() {
        Some(v) if !v.is_empty() => format!("{}={}:{}", t.key, v, t.effect),
        _ => format!("{}:{}", t.key, t.effect),
    }
}

fn labels_flag(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The kubelet flags AL2's `--kubelet-extra-args` and Windows' `-KubeletExtraArgs` carry
/// (upstream `bootstrap.go` `kubeletExtraArgs`): labels, taints, `maxPods`, `podsPerCore`,
/// the reserved resources and eviction thresholds of the node class's kubelet settings.
fn kubelet_extra_args(
    labels: &BTreeMap<String, String>,
    taints: &[String],
    max_pods: Option<&str>,
    kubelet: Option<&KubeletConfiguration>,
) -> String {
    let mut extra = format!("--node-labels={}", labels_flag(labels));
    if !taints.is_empty() {
        let _ = write!(extra, " --register-with-taints={}", taints.join(","));
    }
    if let Some(m) = max_pods {
        let _ = write!(extra, " --max-pods={m}");
    }
    if let Some(k) = kubelet {
        if let Some(n) = k.pods_per_core {
            let _ = write!(extra, " --pods-per-core={n}");
        }
        for (flag, map, separator) in [
            ("--system-reserved", &k.system_reserved, "="),
            ("--kube-reserved", &k.kube_reserved, "="),
            ("--eviction-hard", &k.eviction_hard, "<"),
            ("--eviction-soft", &k.eviction_soft, "<"),
        ] {
            if !map.is_empty() {
                let pairs: Vec<String> = map
                    .iter()
                    .map(|(k, v)| format!("{k}{separator}{v}"))
                    .collect();
                let _ = write!(extra, " {flag}={}", pairs.join(","));
            }
        }
    }
    extra
}

/// The user data (plain text, before base64) for a node of `family`.
pub fn user_data(
    family: AmiFamily,
    cluster: &ClusterInfo,
    node_class: &EC2NodeClass,
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
) -> String {
    let kubelet = node_class.spec.kubelet.as_ref();
    let max_pods = kubelet.and_then(|k| k.max_pods.as_ref()).map(|m| match m {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    });
    let taint_list: Vec<String> = taints.iter().map(taint_flag).collect();
    // `instanceStorePolicy: RAID0`: the instance-store NVMe disks become one RAID0 array that
    // holds the kubelet's and containerd's state, written as upstream writes it for each family
    // (`aws:pkg/providers/amifamily/bootstrap`).
    let raid0 = node_class.spec.instance_store_policy == Some(InstanceStorePolicy::Raid0);
    match family {
        // A custom image bootstraps itself: its user data passes through as given.
        AmiFamily::Custom => node_class.spec.user_data.clone().unwrap_or_default(),
        // Upstream `bootstrap/windows.go`: the node class's PowerShell, then the EKS script.
        AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025 => {
            let mut s = String::from("<powershell>\n");
            if let Some(custom) = &node_class.spec.user_data {
                s.push_str(custom);
                s.push('\n');
            }
            s.push_str(
                "[string]$EKSBootstrapScriptFile = \"$env:ProgramFiles\\Amazon\\EKS\\Start-EKSBootstrap.ps1\"\n",
            );
            let _ = write!(
                s,
                "& $EKSBootstrapScriptFile -EKSClusterName '{}' -APIServerEndpoint '{}'",
                cluster.name, cluster.endpoint
            );
            if !cluster.ca_bundle.is_empty() {
                let _ = write!(s, " -Base64ClusterCA '{}'", cluster.ca_bundle);
            }
            let extra = kubelet_extra_args(labels, &taint_list, max_pods.as_deref(), kubelet);
            let _ = write!(s, " -KubeletExtraArgs '{extra}'");
            if let Some(dns) = cluster_dns(kubelet, cluster) {
                let _ = write!(s, " -DNSClusterIP '{dns}'");
            }
            s.push_str("\n</powershell>");
            s
        }
        AmiFamily::Bottlerocket => {
            let mut s = String::from("[settings.kubernetes]\n");
            let _ = writeln!(s, "cluster-name = {:?}", cluster.name);
            let _ = writeln!(s, "api-server = {:?}", cluster.endpoint);
            if !cluster.ca_bundle.is_empty() {
                let _ = writeln!(s, "cluster-certificate = {:?}", cluster.ca_bundle);
            }
            if let Some(dns) = cluster_dns(kubelet, cluster) {
                let _ = writeln!(s, "cluster-dns-ip = {dns:?}");
            }
            if let Some(m) = &max_pods {
                let _ = writeln!(s, "max-pods = {m}");
            }
            if let Some(k) = kubelet {
                for (table, map) in [
                    ("kube-reserved", &k.kube_reserved),
                    ("system-reserved", &k.system_reserved),
                    ("eviction-hard", &k.eviction_hard),
                    ("eviction-soft", &k.eviction_soft),
                ] {
                    if !map.is_empty() {
                        let _ = writeln!(s, "\n[settings.kubernetes.{table}]");
                        for (key, value) in map {
                            let _ = writeln!(s, "{key:?} = {value:?}");
                        }
                    }
                }
            }
            if raid0 {
                s.push_str(
                    "\n[settings.bootstrap-commands.000-mount-instance-storage]\n\
                     commands = [[\"apiclient\", \"ephemeral-storage\", \"init\"], \
                     [\"apiclient\", \"ephemeral-storage\", \"bind\", \"--dirs\", \
                     \"/var/lib/containerd\", \"/var/lib/kubelet\", \"/var/log/pods\"]]\n\
                     essential = true\nmode = \"always\"\n",
                );
            }
            s.push_str("\n[settings.kubernetes.node-labels]\n");
            for (k, v) in labels {
                let _ = writeln!(s, "{k:?} = {v:?}");
            }
            s.push_str("\n[settings.kubernetes.node-taints]\n");
            let mut by_key: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            for t in taints {
                let value = t.value.clone().unwrap_or_default();
                by_key
                    .entry(t.key.as_str())
                    .or_default()
                    .push(format!("{value}:{}", t.effect));
            }
            for (k, vs) in by_key {
                let _ = writeln!(s, "{k:?} = {vs:?}");
            }
            if let Some(extra) = &node_class.spec.user_data {
                s.push('\n');
                s.push_str(extra);
            }
            s
        }
        AmiFamily::Al2 => {
            let extra = kubelet_extra_args(labels, &taint_list, max_pods.as_deref(), kubelet);
            let mut s = String::from("#!/bin/bash -xe\n");
            if let Some(custom) = &node_class.spec.user_data {
                s.push_str(custom);
                s.push('\n');
            }
            let _ = write!(
                s,
                "exec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n\
                 /etc/eks/bootstrap.sh '{}' --apiserver-endpoint '{}' --b64-cluster-ca '{}' \\\n  \
                 --use-max-pods {} --kubelet-extra-args '{}'{}\n",
                cluster.name,
                cluster.endpoint,
                cluster.ca_bundle,
                max_pods.is_none(),
                extra,
                al2_network_flags(kubelet, cluster, raid0),
            );
            s
        }
        _ => {
            let mut flags = vec![format!("--node-labels={}", labels_flag(labels))];
            if !taint_list.is_empty() {
                flags.push(format!("--register-with-taints={}", taint_list.join(",")));
            }
            // nodeadm passes the node class's kubelet configuration through as written.
            let config = kubelet
                .and_then(|k| serde_json::to_string(k).ok())
                .filter(|json| json != "{}")
                .map(|json| format!("      {json}\n"))
                .unwrap_or_default();
            let mut s = format!(
                "MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{MIME_BOUNDARY}\"\n\n\
                 --{MIME_BOUNDARY}\nContent-Type: application/node.eks.aws\n\n\
                 apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n  cluster:\n    \
                 name: {}\n    apiServerEndpoint: {}\n    certificateAuthority: {}\n    cidr: {}\n  \
                 kubelet:\n",
                cluster.name,
                cluster.endpoint,
                if cluster.ca_bundle.is_empty() {
                    "\"\""
                } else {
                    &cluster.ca_bundle
                },
                cluster.service_cidr.as_deref().unwrap_or("\"\""),
            );
            if !config.is_empty() {
                s.push_str("    config:\n");
                s.push_str(&config);
            }
            s.push_str("    flags:\n");
            for f in &flags {
                let _ = writeln!(s, "    - {f:?}");
            }
            if raid0 {
                s.push_str("  instance:\n    localStorage:\n      strategy: RAID0\n");
            }
            if let Some(custom) = &node_class.spec.user_data {
                let _ = write!(
                    s,
                    "\n--{MIME_BOUNDARY}\nContent-Type: text/x-shellscript; charset=\"us-ascii\"\n\n{custom}\n"
                );
            }
            let _ = write!(s, "\n--{MIME_BOUNDARY}--\n");
            s
        }
    }
}

/// The user data `claim`'s instance boots with, in the format of the node class's effective AMI
/// family ([`EC2NodeClass::ami_family`]: `spec.amiFamily`, else its alias's family), with the
/// claim's labels and taints ([`node_identity`]).
pub fn for_claim(cluster: &ClusterInfo, node_class: &EC2NodeClass, claim: &NodeClaim) -> String {
    let (labels, taints) = node_identity(claim);
    user_data(
        node_class.ami_family(),
        cluster,
        node_class,
        &labels,
        &taints,
    )
}

/// The kubelet's view of user data: the labels and taints it registers with, parsed back out of
/// any of the formats [`user_data`] writes. The sandbox's simulated kubelet boots this way.
pub fn parse_registration(user_data: &str) -> (BTreeMap<String, String>, Vec<Taint>) {
    let mut labels = BTreeMap::new();
    let mut taints = Vec::new();
    let unquote = |s: &str| s.trim().trim_matches('"').to_string();
    let mut section = "";
    for raw in user_data.lines() {
        let line = raw.trim().trim_start_matches("- ").trim_matches('"');
        if line.starts_with('[') {
            section = match line {
                "[settings.kubernetes.node-labels]" => "labels",
                "[settings.kubernetes.node-taints]" => "taints",
                _ => "",
            };
            continue;
        }
        if !section.is_empty() {
            if let Some((k, v)) = raw.split_once('=') {
                let key = unquote(k);
                if section == "labels" {
                    labels.insert(key, unquote(v));
                } else {
                    for item in v.trim().trim_matches(['[', ']']).split(',') {
                        let item = unquote(item);
                        if let Some((value, effect)) = item.rsplit_once(':') {
                            taints.push(Taint {
                                key: key.clone(),
                                value: (!value.is_empty()).then(|| value.to_string()),
                                effect: effect.to_string(),
                                time_added: None,
                            });
                        }
                    }
                }
            }
            continue;
        }
        for token in line.split([' ', '\'', '"']) {
            if let Some(list) = token.strip_prefix("--node-labels=") {
                for pair in list.split(',').filter(|p| !p.is_empty()) {
                    if let Some((k, v)) = pair.split_once('=') {
                        labels.insert(k.to_string(), v.to_string());
                    }
                }
            } else if let Some(list) = token.strip_prefix("--register-with-taints=") {
                for item in list.split(',').filter(|p| !p.is_empty()) {
                    let Some((kv, effect)) = item.rsplit_once(':') else {
                        continue;
                    };
                    let (key, value) = match kv.split_once('=') {
                        Some((k, v)) => (k.to_string(), Some(v.to_string())),
                        None => (kv.to_string(), None),
                    };
                    taints.push(Taint {
                        key,
                        value,
                        effect: effect.to_string(),
                        time_added: None,
                    });
                }
            }
        }
    }
    (labels, taints)
}

/// The kubelet's view of its own configuration in user data written by [`user_data`]: the AMI
/// family the format belongs to (nodeadm `NodeConfig`: AL2023; `bootstrap.sh`: AL2;
/// `Start-EKSBootstrap.ps1`: Windows2022, the year being the image's, see [`windows_family`];
/// Bottlerocket TOML; anything else: Custom) and the settings that size the node (`maxPods`,
/// `podsPerCore`, `kubeReserved`, `systemReserved`, `evictionHard`, `evictionSoft`). The
/// sandbox's simulated kubelets on the AWS provider size their Node from it, as a real kubelet
/// reads its flags and config file.
pub fn parse_kubelet(user_data: &str) -> (AmiFamily, KubeletConfiguration) {
    let mut kubelet = KubeletConfiguration::default();
    if user_data.contains("application/node.eks.aws") {
        // The `config:` mapping is one JSON line under `kubelet:`.
        let mut lines = user_data.lines();
        while let Some(line) = lines.next() {
            if line.trim() == "config:"
                && let Some(json) = lines.next()
                && let Ok(parsed) = serde_json::from_str::<KubeletConfiguration>(json.trim())
            {
                kubelet = parsed;
                break;
            }
        }
        return (AmiFamily::Al2023, kubelet);
    }
    let windows = user_data.contains("Start-EKSBootstrap.ps1");
    if windows || user_data.contains("/etc/eks/bootstrap.sh") {
        for token in user_data.split([' ', '\'', '"', '\n']) {
            let Some((flag, value)) = token.split_once('=') else {
                continue;
            };
            let pairs = |separator: char| -> BTreeMap<String, String> {
                value
                    .split(',')
                    .filter_map(|p| p.split_once(separator))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            };
            match flag {
                "--max-pods" => kubelet.max_pods = value.parse().ok().map(IntOrString::Int),
                "--pods-per-core" => kubelet.pods_per_core = value.parse().ok(),
                "--kube-reserved" => kubelet.kube_reserved = pairs('='),
                "--system-reserved" => kubelet.system_reserved = pairs('='),
                "--eviction-hard" => kubelet.eviction_hard = pairs('<'),
                "--eviction-soft" => kubelet.eviction_soft = pairs('<'),
                _ => {}
            }
        }
        // Windows user data names no release year: the caller that knows the image refines it
        // ([`windows_family`]).
        let family = if windows {
            AmiFamily::Windows2022
        } else {
            AmiFamily::Al2
        };
        return (family, kubelet);
    }
    if user_data.contains("[settings.kubernetes]") {
        let unquote = |s: &str| s.trim().trim_matches('"').to_string();
        let mut table = "";
        for line in user_data.lines() {
            let line = line.trim();
            if let Some(name) = line.strip_prefix("[settings.kubernetes") {
                table = name.trim_end_matches(']').trim_start_matches('.');
                continue;
            }
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let (key, value) = (unquote(key), unquote(value));
            match table {
                "" if key == "max-pods" => {
                    kubelet.max_pods = value.parse().ok().map(IntOrString::Int);
                }
                "kube-reserved" => _ = kubelet.kube_reserved.insert(key, value),
                "system-reserved" => _ = kubelet.system_reserved.insert(key, value),
                "eviction-hard" => _ = kubelet.eviction_hard.insert(key, value),
                "eviction-soft" => _ = kubelet.eviction_soft.insert(key, value),
                _ => {}
            }
        }
        return (AmiFamily::Bottlerocket, kubelet);
    }
    (AmiFamily::Custom, kubelet)
}

/// The Windows family an image of `image_name` belongs to, by the release year in its name
/// (the EKS-optimized images are named `Windows_Server-<year>-English-Core-EKS_Optimized-<k8s>`,
/// see [`crate::cloudprovider::aws::alias`]); `None` for a name without a known year.
pub fn windows_family(image_name: &str) -> Option<AmiFamily> {
    [
        AmiFamily::Windows2019,
        AmiFamily::Windows2022,
        AmiFamily::Windows2025,
    ]
    .into_iter()
    .find(|f| {
        f.windows_year()
            .is_some_and(|year| image_name.contains(&format!("Windows_Server-{year}-")))
    })
}

/// Default block devices when the node class lists none: a 20 GiB gp3 root volume on
/// `/dev/xvda` (AL2, AL2023); Bottlerocket adds a 20 GiB data volume on `/dev/xvdb` after a
/// 4 GiB root.
fn default_block_devices(family: AmiFamily) -> Vec<BlockDevice> {
    let gp3 = |device: &str, gib: i32| BlockDevice {
        device_name: device.to_string(),
        volume_size_gib: Some(gib),
        volume_type: Some("gp3".into()),
        iops: None,
        throughput: None,
        encrypted: Some(true),
        kms_key_id: None,
        snapshot_id: None,
        delete_on_termination: Some(true),
        volume_initialization_rate: None,
    };
    match family {
        AmiFamily::Bottlerocket => vec![gp3("/dev/xvda", 4), gp3("/dev/xvdb", 20)],
        _ => vec![gp3("/dev/xvda", 20)],
    }
}

fn gib(q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity) -> Option<i32> {
    let bytes = karpenter_core::scheduling::resources::parse_units(&q.0).ok()?;
    i32::try_from((bytes + (1 << 30) - 1) >> 30).ok()
}

/// The name EC2 gives a `Toggle` (`enabled`, `disabled`).
fn toggle_name(t: Toggle) -> String {
    match t {
        Toggle::Enabled => "enabled".into(),
        Toggle::Disabled => "disabled".into(),
    }
}

/// The network interfaces of a node class's template (upstream `generateNetworkInterfaces` in
/// `aws:pkg/providers/launchtemplate/launchtemplate.go`), the node class's security groups going
/// on each:
/// - `spec.networkInterfaces` as listed (card, device, type); an `efa-only` interface gets no
///   public address, prefixes, IPv6 address or connection tracking (EC2 refuses them there);
/// - else, when `associatePublicIPAddress`, `ipPrefixCount` or `connectionTracking` is set, or
///   the cluster is IPv6 (`ipv6`), one primary interface (device 0) carrying them: upstream gives
///   every node of an IPv6 cluster `PrimaryIpv6` and one `Ipv6AddressCount` on it;
/// - else none: EC2's default primary interface, so templates of IPv4 clusters' node classes
///   that set none of these keep their content and name (upstream always writes the primary
///   interface).
///
/// `ipPrefixCount` gives IPv4 prefixes, or IPv6 prefixes on an IPv6 cluster (`ipv6`), where each
/// interface that carries addresses also gets its primary IPv6 address (`PrimaryIpv6`, one
/// `Ipv6AddressCount`).
pub fn network_interfaces(spec: &EC2NodeClassSpec, ipv6: bool) -> Vec<NetworkInterface> {
    if !spec.network_interfaces.is_empty() {
        return spec
            .network_interfaces
            .iter()
            .map(|n| match n.interface_type {
                InterfaceType::Interface => addressed(
                    spec,
                    ipv6,
                    Some(n.network_card_index),
                    n.device_index,
                    Some("interface"),
                ),
                InterfaceType::EfaOnly => NetworkInterface {
                    network_card_index: Some(n.network_card_index),
                    device_index: n.device_index,
                    interface_type: Some("efa-only".into()),
                    ..NetworkInterface::default()
                },
            })
            .collect();
    }
    if ipv6
        || spec.associate_public_ip_address.is_some()
        || spec.ip_prefix_count.is_some()
        || tracking(spec).is_some()
    {
        return vec![addressed(spec, ipv6, None, 0, None)];
    }
    Vec::new()
}

/// The node class's connection tracking timeouts, `None` when it sets none.
fn tracking(spec: &EC2NodeClassSpec) -> Option<ConnectionTracking> {
    spec.connection_tracking
        .as_ref()
        .map(|c| ConnectionTracking {
            tcp_established_timeout: c.tcp_established_timeout,
            udp_stream_timeout: c.udp_stream_timeout,
            udp_timeout: c.udp_timeout,
        })
        .filter(|c| *c != ConnectionTracking::default())
}

/// An interface that carries IP addresses, with the node class's address settings.
fn addressed(
    spec: &EC2NodeClassSpec,
    ipv6: bool,
    card: Option<i32>,
    device: i32,
    kind: Option<&str>,
) -> NetworkInterface {
    NetworkInterface {
        network_card_index: card,
        device_index: device,
        interface_type: kind.map(str::to_string),
        associate_public_ip_address: spec.associate_public_ip_address,
        ipv4_prefix_count: spec.ip_prefix_count.filter(|_| !ipv6),
        ipv6_prefix_count: spec.ip_prefix_count.filter(|_| ipv6),
        primary_ipv6: ipv6.then_some(true),
        ipv6_address_count: ipv6.then_some(1),
        connection_tracking: tracking(spec),
    }
}

/// Make `data` attach `count` EFA interfaces, one per network card, for a NodeClaim that
/// requests `vpc.amazonaws.com/efa` launching on a type with `count` EFA devices (upstream's
/// `EFACount` in `generateNetworkInterfaces`): card `i`, device 0 on the first card and 1 on
/// the others (so the first card's is the primary interface), type `efa`, each with the node
/// class's address settings. A node class that lists `networkInterfaces` keeps its own, and
/// `count` 0 changes nothing. The content, and so the template's name, differs per count.
pub fn for_efa(data: &mut LaunchTemplateData, spec: &EC2NodeClassSpec, count: i64, ipv6: bool) {
    if count <= 0 || !spec.network_interfaces.is_empty() {
        return;
    }
    data.network_interfaces = (0..count)
        .filter_map(|i| i32::try_from(i).ok())
        .map(|i| addressed(spec, ipv6, Some(i), i32::from(i != 0), Some("efa")))
        .collect();
}

/// Make `data` launch into the placement group `group` (upstream `buildPlacement`): its id, and
/// for a `partition` group the partition `partition` when the NodeClaim asks for one (EC2 picks
/// otherwise). The content, and so the template's name, differs per group and partition.
pub fn for_placement(
    data: &mut LaunchTemplateData,
    group: &PlacementGroupInfo,
    partition: Option<i32>,
) {
    data.placement = Some(Placement {
        group_id: group.id.clone(),
        partition_number: partition.filter(|_| group.strategy == "partition"),
    });
}

/// The launch template content for one image: everything but the instance type and subnet,
/// which the fleet request overrides. `ipv6`: the cluster is IPv6 (`ipPrefixCount` then gives
/// IPv6 prefixes, see [`network_interfaces`]).
pub fn data(
    node_class: &EC2NodeClass,
    family: AmiFamily,
    image_id: &str,
    user_data: &str,
    ipv6: bool,
) -> LaunchTemplateData {
    let spec = &node_class.spec;
    let status = node_class.status.clone().unwrap_or_default();
    let mut block_devices: Vec<BlockDevice> = spec
        .block_device_mappings
        .iter()
        .filter_map(|b| {
            let ebs = b.ebs.as_ref()?;
            Some(BlockDevice {
                device_name: b.device_name.clone().unwrap_or_else(|| "/dev/xvda".into()),
                volume_size_gib: ebs.volume_size.as_ref().and_then(gib),
                volume_type: ebs.volume_type.as_ref().map(|t| {
                    serde_json::to_value(t)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                }),
                iops: ebs.iops.and_then(|i| i32::try_from(i).ok()),
                throughput: ebs.throughput.and_then(|i| i32::try_from(i).ok()),
                encrypted: ebs.encrypted,
                kms_key_id: ebs.kms_key_id.clone(),
                snapshot_id: ebs.snapshot_id.clone(),
                delete_on_termination: ebs.delete_on_termination,
                volume_initialization_rate: ebs.volume_initialization_rate,
            })
        })
        .collect();
    if block_devices.is_empty() {
        block_devices = default_block_devices(family);
    }
    let m = spec.metadata_options.clone().unwrap_or_default();
    let toggle = |t: Option<Toggle>, default: &str| {
        t.and_then(|t| serde_json::to_value(t).ok())
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_else(|| default.to_string())
    };
    LaunchTemplateData {
        image_id: image_id.to_string(),
        user_data: base64::engine::general_purpose::STANDARD.encode(user_data),
        security_group_ids: status
            .security_groups
            .iter()
            .map(|g| g.id.clone())
            .collect(),
        instance_profile: status.instance_profile.clone(),
        block_devices,
        metadata: MetadataOptions {
            http_endpoint: toggle(m.http_endpoint, "enabled"),
            http_protocol_ipv6: toggle(m.http_protocol_ipv6, "disabled"),
            http_put_response_hop_limit: m
                .http_put_response_hop_limit
                .and_then(|h| i32::try_from(h).ok())
                .unwrap_or(1),
            http_tokens: match m.http_tokens {
                Some(HttpTokens::Optional) => "optional".into(),
                _ => "required".into(),
            },
        },
        monitoring: spec.detailed_monitoring.unwrap_or(false),
        capacity_reservation_id: None,
        no_open_reservations: false,
        market_type: None,
        network_interfaces: network_interfaces(spec, ipv6),
        nested_virtualization: spec
            .cpu_options
            .as_ref()
            .and_then(|c| c.nested_virtualization)
            .map(toggle_name),
        placement: None,
    }
}

/// Make `data` launch into the capacity reservation `id` only (upstream
/// `aws:pkg/providers/launchtemplate/types.go`): its `CapacityReservationSpecification` targets
/// the id, and a Capacity Block (`reservation_type` `capacity-block`) also sets
/// `InstanceMarketOptions.MarketType=capacity-block`. The content, and so the template's name,
/// differs per reservation.
pub fn for_reservation(data: &mut LaunchTemplateData, id: &str, reservation_type: &str) {
    data.capacity_reservation_id = Some(id.to_string());
    data.market_type =
        (reservation_type == ec2api::CAPACITY_BLOCK).then(|| ec2api::CAPACITY_BLOCK.to_string());
}

/// The template's name: the prefix and a hash of its content and cluster, so equal content
/// reuses one template and any change makes a new one.
pub fn name(cluster: &str, data: &LaunchTemplateData) -> String {
    let content = serde_json::to_string(data).unwrap_or_default();
    format!(
        "{NAME_PREFIX}{:016x}",
        fnv(&format!("{cluster}\n{content}"))
    )
}

/// Tags on a launch template: the cluster and the node class it was made for.
pub fn tags(cluster: &str, node_class: &str) -> BTreeMap<String, String> {
    [
        (CLUSTER_TAG.to_string(), cluster.to_string()),
        (
            crds::labels::EC2NODECLASS_TAG_KEY.to_string(),
            node_class.to_string(),
        ),
        (DISCOVERY_TAG.to_string(), cluster.to_string()),
    ]
    .into_iter()
    .collect()
}

/// FNV-1a, 64 bits: a stable content hash (not for security).
pub fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
#[path = "launchtemplate_tests.rs"]
mod tests;

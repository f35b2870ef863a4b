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
    if user_data.contains("/etc/eks/bootstrap.sh") {
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
        return (AmiFamily::Al2, kubelet);
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
/// - else, when `associatePublicIPAddress`, `ipPrefixCount` or `connectionTracking` is set, one
///   primary interface (device 0) carrying them;
/// - else none: EC2's default primary interface, so templates of node classes that set none of
///   these keep their content and name (upstream always writes the primary interface).
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
    if spec.associate_public_ip_address.is_some()
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
mod tests {
    use super::*;
    use std::collections::BTreeSet;
    use testutil::ec2nodeclass;

    fn cluster() -> ClusterInfo {
        ClusterInfo {
            name: "demo".into(),
            endpoint: "https://127.0.0.1:6443".into(),
            ca_bundle: String::new(),
            service_cidr: Some("172.20.0.0/16".into()),
            ..ClusterInfo::default()
        }
    }

    /// The service CIDR reaches every family: AL2023's NodeConfig `cidr` (nodeadm derives the
    /// DNS address), AL2's `--dns-cluster-ip` and Bottlerocket's `cluster-dns-ip`, the tenth
    /// address of the range; an IPv6 cluster's `::a`, with AL2's IPv6 flags; a node class's
    /// `kubelet.clusterDNS` wins over the derived address.
    #[test]
    fn the_service_cidr_gives_every_family_its_cluster_dns() {
        let nc = ec2nodeclass("default").build();
        let ud = |family, cluster: &ClusterInfo, nc: &EC2NodeClass| {
            user_data(family, cluster, nc, &BTreeMap::new(), &[])
        };
        let v4 = cluster();
        assert_eq!(v4.dns_ip().as_deref(), Some("172.20.0.10"));
        assert!(ud(AmiFamily::Al2023, &v4, &nc).contains("    cidr: 172.20.0.0/16\n"));
        let al2 = ud(AmiFamily::Al2, &v4, &nc);
        assert!(al2.contains("--dns-cluster-ip '172.20.0.10'"), "{al2}");
        assert!(!al2.contains("--ip-family"), "{al2}");
        let br = ud(AmiFamily::Bottlerocket, &v4, &nc);
        assert!(br.contains("cluster-dns-ip = \"172.20.0.10\"\n"), "{br}");
        let custom = ClusterInfo {
            service_cidr: Some("10.100.0.0/16".into()),
            ..cluster()
        };
        assert!(ud(AmiFamily::Al2, &custom, &nc).contains("--dns-cluster-ip '10.100.0.10'"));
        let v6 = ClusterInfo {
            service_cidr: Some("fd30:1c53:5f8a::/108".into()),
            ..cluster()
        };
        assert!(v6.ipv6());
        assert_eq!(v6.dns_ip().as_deref(), Some("fd30:1c53:5f8a::a"));
        let al2 = ud(AmiFamily::Al2, &v6, &nc);
        assert!(
            al2.contains("--ip-family ipv6 --service-ipv6-cidr 'fd30:1c53:5f8a::/108'"),
            "{al2}"
        );
        assert!(ud(AmiFamily::Al2023, &v6, &nc).contains("    cidr: fd30:1c53:5f8a::/108\n"));
        assert!(
            ud(AmiFamily::Bottlerocket, &v6, &nc)
                .contains("cluster-dns-ip = \"fd30:1c53:5f8a::a\"")
        );
        let mut pinned = nc.clone();
        pinned.spec.kubelet = Some(crds::ec2nodeclass::KubeletConfiguration {
            cluster_dns: vec!["169.254.20.10".into()],
            ..Default::default()
        });
        assert!(ud(AmiFamily::Al2, &v4, &pinned).contains("--dns-cluster-ip '169.254.20.10'"));
        let unknown = ClusterInfo {
            service_cidr: None,
            ..cluster()
        };
        assert!(!ud(AmiFamily::Al2, &unknown, &nc).contains("--dns-cluster-ip"));
        // An IPv6 cluster known by DescribeCluster's ipFamily and its kube-dns Service, without
        // a service CIDR: the kube-dns address and the IPv6 family, no empty CIDR flag.
        let six = ClusterInfo {
            service_cidr: None,
            ip_family: Some("ipv6".into()),
            kube_dns_ip: Some("fd7e:4c2a:1b::a".into()),
            ..cluster()
        };
        let al2 = ud(AmiFamily::Al2, &six, &nc);
        assert!(
            al2.contains("--dns-cluster-ip 'fd7e:4c2a:1b::a' \\\n  --ip-family ipv6")
                && !al2.contains("--service-ipv6-cidr"),
            "{al2}"
        );
        assert!(
            ud(AmiFamily::Bottlerocket, &six, &nc).contains("cluster-dns-ip = \"fd7e:4c2a:1b::a\"")
        );
        // The kube-dns Service's address wins over the one a CIDR implies.
        let read = ClusterInfo {
            kube_dns_ip: Some("172.20.0.53".into()),
            ..cluster()
        };
        assert_eq!(read.dns_ip().as_deref(), Some("172.20.0.53"));
    }

    #[test]
    fn every_family_round_trips_labels_and_taints_through_the_kubelet_view() {
        let labels: BTreeMap<String, String> =
            [("karpenter.sh/nodepool", "default"), ("team", "web")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        let taints = vec![
            Taint {
                key: "dedicated".into(),
                value: Some("gpu".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            },
            crds::labels::unregistered_no_execute_taint(),
        ];
        for family in [AmiFamily::Al2023, AmiFamily::Al2, AmiFamily::Bottlerocket] {
            let ud = user_data(
                family,
                &cluster(),
                &ec2nodeclass("default").build(),
                &labels,
                &taints,
            );
            let (l, t) = parse_registration(&ud);
            assert_eq!(l, labels, "{family:?} labels:\n{ud}");
            assert_eq!(t, taints, "{family:?} taints:\n{ud}");
        }
    }

    #[test]
    fn every_family_round_trips_the_kubelet_settings_that_size_the_node() {
        let nc: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "sized"},
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"id": "subnet-1"}],
                     "securityGroupSelectorTerms": [{"id": "sg-1"}],
                     "kubelet": {"maxPods": 8, "podsPerCore": 4,
                                 "kubeReserved": {"cpu": "1", "memory": "1Gi"},
                                 "systemReserved": {"memory": "300Mi"},
                                 "evictionHard": {"memory.available": "5%"},
                                 "evictionSoft": {"nodefs.available": "15%"}}}}))
        .expect("node class");
        let want = nc.spec.kubelet.clone().expect("kubelet");
        for family in [AmiFamily::Al2023, AmiFamily::Al2, AmiFamily::Bottlerocket] {
            let ud = user_data(family, &cluster(), &nc, &BTreeMap::new(), &[]);
            let (seen, k) = parse_kubelet(&ud);
            assert_eq!(seen, family, "{ud}");
            assert_eq!(k.max_pods, want.max_pods, "{family:?}:\n{ud}");
            assert_eq!(k.kube_reserved, want.kube_reserved, "{family:?}:\n{ud}");
            assert_eq!(k.system_reserved, want.system_reserved, "{family:?}:\n{ud}");
            assert_eq!(k.eviction_hard, want.eviction_hard, "{family:?}:\n{ud}");
            assert_eq!(k.eviction_soft, want.eviction_soft, "{family:?}:\n{ud}");
            if family != AmiFamily::Bottlerocket {
                // Bottlerocket has no podsPerCore setting (upstream leaves it out).
                assert_eq!(k.pods_per_core, want.pods_per_core, "{family:?}");
            }
        }
        assert_eq!(parse_kubelet("#!/bin/bash\necho hi").0, AmiFamily::Custom);
    }

    /// `instanceStorePolicy: RAID0` reaches each family's user data as upstream writes it:
    /// nodeadm's `localStorage` strategy, bootstrap.sh's `--local-disks raid0`, Bottlerocket's
    /// ephemeral-storage bootstrap command; without it, none of them.
    #[test]
    fn raid0_assembles_the_instance_store_in_every_familys_user_data() {
        let raid: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "nvme"},
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"id": "subnet-1"}],
                     "securityGroupSelectorTerms": [{"id": "sg-1"}],
                     "instanceStorePolicy": "RAID0"}}))
        .expect("node class");
        let plain = ec2nodeclass("default").build();
        let ud =
            |family, nc: &EC2NodeClass| user_data(family, &cluster(), nc, &BTreeMap::new(), &[]);
        let al2023 = ud(AmiFamily::Al2023, &raid);
        assert!(
            al2023.contains("  instance:\n    localStorage:\n      strategy: RAID0\n"),
            "{al2023}"
        );
        let al2 = ud(AmiFamily::Al2, &raid);
        assert!(al2.contains("\\\n  --local-disks raid0\n"), "{al2}");
        let bottlerocket = ud(AmiFamily::Bottlerocket, &raid);
        assert!(
            bottlerocket.contains(
                "[settings.bootstrap-commands.000-mount-instance-storage]\n\
                 commands = [[\"apiclient\", \"ephemeral-storage\", \"init\"], \
                 [\"apiclient\", \"ephemeral-storage\", \"bind\", \"--dirs\", \
                 \"/var/lib/containerd\", \"/var/lib/kubelet\", \"/var/log/pods\"]]\n\
                 essential = true\nmode = \"always\"\n"
            ),
            "{bottlerocket}"
        );
        // The kubelet's view still parses (labels, taints, settings around the new table).
        assert_eq!(parse_kubelet(&bottlerocket).0, AmiFamily::Bottlerocket);
        for family in [AmiFamily::Al2023, AmiFamily::Al2, AmiFamily::Bottlerocket] {
            let ud = ud(family, &plain);
            assert!(
                !ud.contains("RAID0") && !ud.contains("raid0") && !ud.contains("ephemeral-storage"),
                "{family:?}: {ud}"
            );
        }
    }

    /// The kubelet settings that do not size the node reach AL2023's NodeConfig `kubelet.config`
    /// as the kubelet reads them (KubeletConfiguration's field names and value types). AL2's
    /// bootstrap flags and Bottlerocket's TOML do not carry them yet.
    #[test]
    fn al2023_passes_the_node_class_kubelet_settings_to_the_kubelet_config() {
        let nc: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "tuned"},
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"id": "subnet-1"}],
                     "securityGroupSelectorTerms": [{"id": "sg-1"}],
                     "kubelet": {"clusterDNS": ["10.0.0.10", "169.254.20.10"],
                                 "cpuCFSQuota": false,
                                 "evictionMaxPodGracePeriod": 42,
                                 "evictionSoft": {"memory.available": "10%"},
                                 "evictionSoftGracePeriod": {"memory.available": "1m30s"},
                                 "imageGCHighThresholdPercent": 77,
                                 "imageGCLowThresholdPercent": 55}}}))
        .expect("node class");
        let ud = user_data(AmiFamily::Al2023, &cluster(), &nc, &BTreeMap::new(), &[]);
        let mut lines = ud.lines().skip_while(|l| l.trim() != "config:");
        let json = lines.nth(1).expect("a kubelet config line");
        let config: serde_json::Value = serde_json::from_str(json.trim()).expect("JSON");
        assert_eq!(
            config["clusterDNS"],
            serde_json::json!(["10.0.0.10", "169.254.20.10"])
        );
        assert_eq!(config["cpuCFSQuota"], false);
        assert_eq!(config["evictionMaxPodGracePeriod"], 42);
        assert_eq!(
            config["evictionSoftGracePeriod"]["memory.available"],
            "1m30s"
        );
        assert_eq!(config["imageGCHighThresholdPercent"], 77);
        assert_eq!(config["imageGCLowThresholdPercent"], 55);
        // Without a kubelet section there is no config to pass.
        let plain = user_data(
            AmiFamily::Al2023,
            &cluster(),
            &ec2nodeclass("default").build(),
            &BTreeMap::new(),
            &[],
        );
        assert!(!plain.contains("config:"), "{plain}");
    }

    /// `spec.amiFamily` decides the bootstrap format of images selected by id (which say
    /// nothing of their family), and overrides an alias's family (`Custom` keeps the node
    /// class's own user data as the whole of it).
    #[test]
    fn the_ami_family_decides_the_bootstrap_format() {
        let claim = testutil::nodeclaim("default-x").nodepool("default").build();
        let with = |family: &str, terms: serde_json::Value| -> EC2NodeClass {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                "metadata": {"name": "byid"},
                "spec": {"role": "r", "amiFamily": family, "amiSelectorTerms": terms,
                         "subnetSelectorTerms": [{"id": "subnet-1"}],
                         "securityGroupSelectorTerms": [{"id": "sg-1"}],
                         "userData": "#!/bin/bash\necho mine\n"}}))
            .expect("node class")
        };
        let by_id = serde_json::json!([{"id": "ami-0123456789abcdef0"}]);
        for (family, want) in [
            ("AL2023", AmiFamily::Al2023),
            ("AL2", AmiFamily::Al2),
            ("Bottlerocket", AmiFamily::Bottlerocket),
        ] {
            let ud = for_claim(&cluster(), &with(family, by_id.clone()), &claim);
            assert_eq!(parse_kubelet(&ud).0, want, "{family}:\n{ud}");
            assert_eq!(
                parse_registration(&ud).0.get(crds::labels::NODEPOOL_LABEL),
                Some(&"default".to_string()),
                "{family}:\n{ud}"
            );
        }
        let custom = for_claim(
            &cluster(),
            &with("Custom", serde_json::json!([{"alias": "al2023@latest"}])),
            &claim,
        );
        assert_eq!(custom, "#!/bin/bash\necho mine\n");
        // Without spec.amiFamily the alias's family applies.
        let mut aliased = with("AL2023", serde_json::json!([{"alias": "al2@latest"}]));
        aliased.spec.ami_family = None;
        assert_eq!(
            parse_kubelet(&for_claim(&cluster(), &aliased, &claim)).0,
            AmiFamily::Al2
        );
    }

    #[test]
    fn windows_user_data_runs_the_eks_bootstrap_script_after_the_node_class_powershell() {
        let claim = testutil::nodeclaim("default-w")
            .nodepool("default")
            .label("team", "web")
            .build();
        let mut nc = ec2nodeclass("default")
            .ami_alias("windows2022@latest")
            .build();
        nc.spec.user_data = Some("Write-Host mine".into());
        nc.spec.kubelet = Some(KubeletConfiguration {
            max_pods: Some(IntOrString::Int(30)),
            cluster_dns: vec!["10.100.0.10".into()],
            ..KubeletConfiguration::default()
        });
        let ud = for_claim(&cluster(), &nc, &claim);
        let lines: Vec<&str> = ud.lines().collect();
        assert_eq!(lines.first(), Some(&"<powershell>"));
        assert_eq!(lines.get(1), Some(&"Write-Host mine"), "{ud}");
        assert_eq!(lines.last(), Some(&"</powershell>"));
        let run = lines.get(3).copied().unwrap_or_default();
        assert!(
            run.starts_with("& $EKSBootstrapScriptFile -EKSClusterName 'demo' -APIServerEndpoint 'https://127.0.0.1:6443'"),
            "{ud}"
        );
        assert!(run.contains(" --max-pods=30"), "{run}");
        assert!(run.ends_with(" -DNSClusterIP '10.100.0.10'"), "{run}");
        // The simulated kubelet registers with the labels and taints the script passes.
        let (labels, taints) = parse_registration(&ud);
        assert_eq!(labels.get("team").map(String::as_str), Some("web"));
        assert!(taints.iter().any(|t| t.key == "karpenter.sh/unregistered"));
    }

    #[test]
    fn al2023_user_data_is_a_nodeconfig_with_the_cluster() {
        let ud = user_data(
            AmiFamily::Al2023,
            &cluster(),
            &ec2nodeclass("default").build(),
            &BTreeMap::new(),
            &[],
        );
        assert!(ud.contains("kind: NodeConfig"));
        assert!(ud.contains("apiServerEndpoint: https://127.0.0.1:6443"));
        assert!(ud.contains("Content-Type: application/node.eks.aws"));
    }

    #[test]
    fn equal_content_shares_a_name_and_any_change_makes_a_new_one() {
        let nc = ec2nodeclass("default").build();
        let a = data(&nc, AmiFamily::Al2023, "ami-1", "x", false);
        let b = data(&nc, AmiFamily::Al2023, "ami-1", "x", false);
        let c = data(&nc, AmiFamily::Al2023, "ami-2", "x", false);
        assert_eq!(name("demo", &a), name("demo", &b));
        assert_ne!(name("demo", &a), name("demo", &c));
        assert_ne!(name("demo", &a), name("other", &a));
        assert!(name("demo", &a).starts_with(NAME_PREFIX));
        assert_eq!(a.block_devices[0].volume_size_gib, Some(20));
        assert_eq!(a.metadata.http_tokens, "required");
    }

    #[test]
    fn a_reserved_template_is_its_own_per_reservation_and_leaves_other_names_alone() {
        let nc = ec2nodeclass("default").build();
        let plain = data(&nc, AmiFamily::Al2023, "ami-1", "x", false);
        // Templates without a reservation serialize as before, so their names do not change.
        let json = serde_json::to_string(&plain).expect("json");
        assert!(!json.contains("capacity_reservation_id") && !json.contains("market_type"));
        let mut odcr = plain.clone();
        for_reservation(&mut odcr, "cr-1", "default");
        assert_eq!(odcr.capacity_reservation_id.as_deref(), Some("cr-1"));
        assert_eq!(odcr.market_type, None);
        let mut other = plain.clone();
        for_reservation(&mut other, "cr-2", "default");
        let mut block = plain.clone();
        for_reservation(&mut block, "cr-3", "capacity-block");
        assert_eq!(block.market_type.as_deref(), Some("capacity-block"));
        let names: BTreeSet<String> = [&plain, &odcr, &other, &block]
            .into_iter()
            .map(|d| name("demo", d))
            .collect();
        assert_eq!(names.len(), 4, "one template per reservation");
    }

    #[test]
    fn block_devices_metadata_options_and_monitoring_reach_the_template() {
        let nc: EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "full"},
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"id": "subnet-1"}],
                     "securityGroupSelectorTerms": [{"id": "sg-1"}],
                     "detailedMonitoring": true,
                     "metadataOptions": {"httpEndpoint": "disabled", "httpProtocolIPv6": "enabled",
                                         "httpPutResponseHopLimit": 3, "httpTokens": "optional"},
                     "blockDeviceMappings": [{"deviceName": "/dev/xvdb", "rootVolume": true,
                         "ebs": {"volumeSize": "100Gi", "volumeType": "io2", "iops": 5000,
                                 "throughput": 250, "encrypted": true, "kmsKeyID": "alias/k",
                                 "snapshotID": "snap-1", "deleteOnTermination": false}}]}}))
        .expect("node class");
        let d = data(&nc, AmiFamily::Al2023, "ami-1", "x", false);
        assert_eq!(
            d.block_devices,
            vec![BlockDevice {
                device_name: "/dev/xvdb".into(),
                volume_size_gib: Some(100),
                volume_type: Some("io2".into()),
                iops: Some(5000),
                throughput: Some(250),
                encrypted: Some(true),
                kms_key_id: Some("alias/k".into()),
                snapshot_id: Some("snap-1".into()),
                delete_on_termination: Some(false),
                volume_initialization_rate: None,
            }]
        );
        assert_eq!(
            d.metadata,
            MetadataOptions {
                http_endpoint: "disabled".into(),
                http_protocol_ipv6: "enabled".into(),
                http_put_response_hop_limit: 3,
                http_tokens: "optional".into(),
            }
        );
        assert!(d.monitoring);
    }

    /// A node class `net` with `spec` merged into a minimal AL2023 one.
    fn with_spec(spec: serde_json::Value) -> EC2NodeClass {
        let mut base = serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
            "metadata": {"name": "net"},
            "spec": {"role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
                     "subnetSelectorTerms": [{"id": "subnet-1"}],
                     "securityGroupSelectorTerms": [{"id": "sg-1"}]}});
        if let (Some(into), Some(from)) = (base["spec"].as_object_mut(), spec.as_object()) {
            into.extend(from.clone());
        }
        serde_json::from_value(base).expect("node class")
    }

    /// `associatePublicIPAddress`, `ipPrefixCount` and `connectionTracking` go on one primary
    /// interface (device 0); `ipPrefixCount` is IPv4 prefixes, or IPv6 prefixes with the
    /// primary IPv6 address on an IPv6 cluster.
    #[test]
    fn address_settings_and_connection_tracking_reach_the_primary_interface() {
        let nc = with_spec(serde_json::json!({
            "associatePublicIPAddress": false, "ipPrefixCount": 2,
            "connectionTracking": {"tcpEstablishedTimeout": 3600, "udpTimeout": 30}}));
        let v4 = data(&nc, AmiFamily::Al2023, "ami-1", "x", false);
        assert_eq!(
            v4.network_interfaces,
            vec![NetworkInterface {
                device_index: 0,
                associate_public_ip_address: Some(false),
                ipv4_prefix_count: Some(2),
                connection_tracking: Some(ConnectionTracking {
                    tcp_established_timeout: Some(3600),
                    udp_stream_timeout: None,
                    udp_timeout: Some(30),
                }),
                ..NetworkInterface::default()
            }]
        );
        let v6 = data(&nc, AmiFamily::Al2023, "ami-1", "x", true);
        let primary = &v6.network_interfaces[0];
        assert_eq!(primary.ipv4_prefix_count, None);
        assert_eq!(primary.ipv6_prefix_count, Some(2));
        assert_eq!(primary.primary_ipv6, Some(true));
        assert_eq!(primary.ipv6_address_count, Some(1));
        // Each setting alone makes the interface.
        for spec in [
            serde_json::json!({"associatePublicIPAddress": true}),
            serde_json::json!({"ipPrefixCount": 0}),
            serde_json::json!({"connectionTracking": {"udpStreamTimeout": 90}}),
        ] {
            let d = data(
                &with_spec(spec.clone()),
                AmiFamily::Al2023,
                "ami-1",
                "x",
                false,
            );
            assert_eq!(d.network_interfaces.len(), 1, "{spec}");
        }
    }

    /// `networkInterfaces` are written as listed; an `efa-only` interface carries no address
    /// settings or connection tracking (EC2 refuses them there), an `interface` one does.
    #[test]
    fn network_interfaces_keep_their_card_device_and_type() {
        let nc = with_spec(serde_json::json!({
            "associatePublicIPAddress": true, "ipPrefixCount": 1,
            "connectionTracking": {"udpTimeout": 45},
            "networkInterfaces": [
                {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
                {"networkCardIndex": 1, "deviceIndex": 1, "interfaceType": "efa-only"}]}));
        let d = data(&nc, AmiFamily::Al2023, "ami-1", "x", false);
        assert_eq!(d.network_interfaces.len(), 2);
        let (primary, efa) = (&d.network_interfaces[0], &d.network_interfaces[1]);
        assert_eq!(
            (primary.network_card_index, primary.device_index),
            (Some(0), 0)
        );
        assert_eq!(primary.interface_type.as_deref(), Some("interface"));
        assert_eq!(primary.associate_public_ip_address, Some(true));
        assert_eq!(primary.ipv4_prefix_count, Some(1));
        assert_eq!(
            primary
                .connection_tracking
                .as_ref()
                .and_then(|c| c.udp_timeout),
            Some(45)
        );
        assert_eq!(
            efa,
            &NetworkInterface {
                network_card_index: Some(1),
                device_index: 1,
                interface_type: Some("efa-only".into()),
                ..NetworkInterface::default()
            }
        );
    }

    /// A NodeClaim requesting EFA gets one `efa` interface per card of its type (device 0 on
    /// the first card, 1 on the others) with the address settings; a node class listing its
    /// own interfaces keeps them.
    #[test]
    fn requested_efa_attaches_one_efa_interface_per_card() {
        let nc = with_spec(serde_json::json!({"ipPrefixCount": 1}));
        let mut d = data(&nc, AmiFamily::Al2023, "ami-1", "x", false);
        for_efa(&mut d, &nc.spec, 3, false);
        let seen: Vec<_> = d
            .network_interfaces
            .iter()
            .map(|n| {
                (
                    n.network_card_index,
                    n.device_index,
                    n.interface_type.as_deref(),
                    n.ipv4_prefix_count,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                (Some(0), 0, Some("efa"), Some(1)),
                (Some(1), 1, Some("efa"), Some(1)),
                (Some(2), 1, Some("efa"), Some(1)),
            ]
        );
        let mut none = data(&nc, AmiFamily::Al2023, "ami-1", "x", false);
        let before = none.clone();
        for_efa(&mut none, &nc.spec, 0, false);
        assert_eq!(none, before);
        let listed = with_spec(serde_json::json!({"networkInterfaces": [
            {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}]}));
        let mut own = data(&listed, AmiFamily::Al2023, "ami-1", "x", false);
        let before = own.clone();
        for_efa(&mut own, &listed.spec, 2, false);
        assert_eq!(own, before, "the node class's own interfaces stay");
    }

    #[test]
    fn cpu_options_and_volume_initialization_rate_reach_the_template() {
        let nc = with_spec(serde_json::json!({
            "cpuOptions": {"nestedVirtualization": "enabled"},
            "blockDeviceMappings": [{"deviceName": "/dev/xvda", "rootVolume": true,
                "ebs": {"snapshotID": "snap-1", "volumeInitializationRate": 200}}]}));
        let d = data(&nc, AmiFamily::Al2023, "ami-1", "x", false);
        assert_eq!(d.nested_virtualization.as_deref(), Some("enabled"));
        assert_eq!(d.block_devices[0].volume_initialization_rate, Some(200));
        let off =
            with_spec(serde_json::json!({"cpuOptions": {"nestedVirtualization": "disabled"}}));
        assert_eq!(
            data(&off, AmiFamily::Al2023, "ami-1", "x", false)
                .nested_virtualization
                .as_deref(),
            Some("disabled")
        );
        // `cpuOptions: {}` asks for nothing.
        let empty = with_spec(serde_json::json!({"cpuOptions": {}}));
        assert_eq!(
            data(&empty, AmiFamily::Al2023, "ami-1", "x", false).nested_virtualization,
            None
        );
    }

    /// A template of a node class that sets none of the network, CPU, volume initialization or
    /// placement settings serializes as before (its name does not change); each one set makes
    /// a template of its own.
    #[test]
    fn templates_without_the_new_settings_keep_their_content_and_name() {
        let plain = data(
            &with_spec(serde_json::json!({})),
            AmiFamily::Al2023,
            "ami-1",
            "x",
            true,
        );
        assert!(plain.network_interfaces.is_empty());
        let json = serde_json::to_string(&plain).expect("json");
        for key in [
            "network_interfaces",
            "nested_virtualization",
            "placement",
            "volume_initialization_rate",
        ] {
            assert!(!json.contains(key), "{key} in {json}");
        }
        let mut placed = plain.clone();
        let group = PlacementGroupInfo {
            id: "pg-0abc".into(),
            name: "training".into(),
            strategy: "partition".into(),
            partition_count: 3,
            spread_level: None,
            state: "available".into(),
        };
        for_placement(&mut placed, &group, Some(2));
        assert_eq!(
            placed.placement,
            Some(Placement {
                group_id: "pg-0abc".into(),
                partition_number: Some(2),
            })
        );
        let mut cluster_group = plain.clone();
        for_placement(
            &mut cluster_group,
            &PlacementGroupInfo {
                strategy: "cluster".into(),
                ..group
            },
            Some(2),
        );
        assert_eq!(
            cluster_group.placement.as_ref().map(|p| p.partition_number),
            Some(None),
            "only partition groups take a partition"
        );
        let names: BTreeSet<String> = [
            plain.clone(),
            placed,
            cluster_group,
            data(
                &with_spec(serde_json::json!({"ipPrefixCount": 1})),
                AmiFamily::Al2023,
                "ami-1",
                "x",
                true,
            ),
            data(
                &with_spec(serde_json::json!({"cpuOptions": {"nestedVirtualization": "enabled"}})),
                AmiFamily::Al2023,
                "ami-1",
                "x",
                true,
            ),
        ]
        .iter()
        .map(|d| name("demo", d))
        .collect();
        assert_eq!(names.len(), 5);
    }

    #[test]
    fn custom_user_data_is_kept_by_al2023_and_al2() {
        for family in [AmiFamily::Al2023, AmiFamily::Al2] {
            let mut nc = ec2nodeclass("default").build();
            nc.spec.user_data = Some("#!/bin/bash\necho custom-step\n".into());
            let ud = user_data(family, &cluster(), &nc, &BTreeMap::new(), &[]);
            assert!(ud.contains("echo custom-step"), "{family:?}:\n{ud}");
        }
    }
}

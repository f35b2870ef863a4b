//! The launch template content and user data of every AMI family, checked field by field.
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
        ud(AmiFamily::Bottlerocket, &v6, &nc).contains("cluster-dns-ip = \"fd30:1c53:5f8a::a\"")
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
    let labels: BTreeMap<String, String> = [("karpenter.sh/nodepool", "default"), ("team", "web")]
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
    // Windows' `-KubeletExtraArgs` carry the same flags; the year is the image's.
    let ud = user_data(
        AmiFamily::Windows2019,
        &cluster(),
        &nc,
        &BTreeMap::new(),
        &[],
    );
    let (seen, k) = parse_kubelet(&ud);
    assert!(seen.windows_build().is_some(), "{seen:?}: {ud}");
    assert_eq!(k.max_pods, want.max_pods, "{ud}");
    assert_eq!(k.kube_reserved, want.kube_reserved, "{ud}");
    assert_eq!(k.eviction_soft, want.eviction_soft, "{ud}");
}

/// A Windows image's family is read from the release year in its name.
#[test]
fn windows_images_name_their_family() {
    for (name, family) in [
        (
            "Windows_Server-2019-English-Core-EKS_Optimized-1.32-2025.01.15",
            AmiFamily::Windows2019,
        ),
        (
            "Windows_Server-2022-English-Core-EKS_Optimized-1.32",
            AmiFamily::Windows2022,
        ),
        (
            "Windows_Server-2025-English-Core-EKS_Optimized-1.33",
            AmiFamily::Windows2025,
        ),
    ] {
        assert_eq!(windows_family(name), Some(family), "{name}");
    }
    assert_eq!(
        windows_family("amazon-eks-node-al2023-x86_64-standard-1.32"),
        None
    );
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
    let ud = |family, nc: &EC2NodeClass| user_data(family, &cluster(), nc, &BTreeMap::new(), &[]);
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

/// On an IPv6 cluster every template writes its primary interface with the primary IPv6
/// address, whether or not the node class sets a network field (upstream
/// `generateNetworkInterfaces`); on an IPv4 cluster a plain node class still writes none.
#[test]
fn ipv6_clusters_always_get_a_primary_ipv6_interface() {
    let plain = with_spec(serde_json::json!({}));
    let v6 = data(&plain, AmiFamily::Al2023, "ami-1", "x", true);
    assert_eq!(
        v6.network_interfaces,
        vec![NetworkInterface {
            device_index: 0,
            primary_ipv6: Some(true),
            ipv6_address_count: Some(1),
            ..NetworkInterface::default()
        }]
    );
    let v4 = data(&plain, AmiFamily::Al2023, "ami-1", "x", false);
    assert!(v4.network_interfaces.is_empty());
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
    let off = with_spec(serde_json::json!({"cpuOptions": {"nestedVirtualization": "disabled"}}));
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
        false,
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

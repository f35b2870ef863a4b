//! What this project does with every field a user can set on its custom resources: each is
//! either honoured, as upstream Karpenter honours it, with the test that proves it; or, while
//! it is not, reported: the object that sets it gets an `UnsupportedField` Event naming it
//! ([`unsupported`]). Nothing accepted is dropped without a word.
//!
//! [`FIELDS`] covers every leaf of the `spec` of the four CRDs, by the longest path prefix that
//! has an entry (`spec.kubelet` covers `spec.kubelet.maxPods`). The test `every_field` in
//! `crds/tests/support.rs` walks the generated schemas and fails on a leaf without an entry, a
//! proof naming a test that does not exist, or a reported field [`unsupported`] does not name.
//! `status` fields are not listed: Karpenter writes them, users do not.

use serde_json::Value;

/// Why a reported field is not honoured yet, and when it counts as set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    /// Only this value counts (one value of an enum field that is not honoured while the
    /// others are); `None`: any value.
    pub value: Option<&'static str>,
    /// What is not done, for the Event, e.g. `capacity reservations are not launched into yet`.
    pub why: &'static str,
}

/// One field (or a whole subtree) of a kind's `spec`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldSupport {
    /// `NodePool`, `NodeClaim`, `EC2NodeClass` or `NodeOverlay`.
    pub kind: &'static str,
    /// The field as the schema spells it, arrays as `[]`: `spec.template.spec.taints[].key`.
    pub path: &'static str,
    /// The test that proves the field honoured, `FILE::function` with FILE relative to the
    /// repository root; `None` when it is not honoured.
    pub proof: Option<&'static str>,
    /// Set (to [`Report::value`] if given), the field is reported instead of honoured.
    pub reported: Option<Report>,
}

const fn honoured(kind: &'static str, path: &'static str, proof: &'static str) -> FieldSupport {
    FieldSupport {
        kind,
        path,
        proof: Some(proof),
        reported: None,
    }
}

/// The reason of the Event an object that sets a field in [`FIELDS`] marked reported gets.
pub const UNSUPPORTED_FIELD_REASON: &str = "UnsupportedField";

const NP: &str = "NodePool";
const NC: &str = "NodeClaim";
const EC2: &str = "EC2NodeClass";
const NO: &str = "NodeOverlay";

/// The proof of the AMI selector term fields other than `alias`.
const AMI_TERMS: &str = "controller/src/cloudprovider/aws/nodeclass_tests.rs::ami_selector_terms_pick_images_by_id_name_owner_ssm_parameter_and_tags";
/// The proof of the kubelet settings that reach the kubelet's configuration unchanged.
const KUBELET_PASS_THROUGH: &str = "controller/src/cloudprovider/aws/launchtemplate_tests.rs::al2023_passes_the_node_class_kubelet_settings_to_the_kubelet_config";

/// Every field of the four kinds' `spec`, honoured or reported. Kept in sync with the schemas by
/// `crds/tests/support.rs`.
pub const FIELDS: &[FieldSupport] = &[
    // NodePool
    honoured(
        NP,
        "spec.disruption.budgets",
        "tests/tests/consolidation.rs::drift_and_consolidation_together_share_one_budget_and_never_one_node",
    ),
    honoured(
        NP,
        "spec.disruption.budgets[].reasons",
        "tests/tests/consolidation.rs::a_scheduled_zero_budget_stops_consolidation_but_not_drift",
    ),
    honoured(
        NP,
        "spec.disruption.budgets[].schedule",
        "karpenter-core/src/disruption/upgrade/tests.rs::scheduled_budgets_are_active_for_their_duration_after_each_hit",
    ),
    honoured(
        NP,
        "spec.disruption.budgets[].duration",
        "karpenter-core/src/disruption/upgrade/tests.rs::scheduled_budgets_are_active_for_their_duration_after_each_hit",
    ),
    honoured(
        NP,
        "spec.disruption.consolidateAfter",
        "tests/tests/consolidation.rs::consolidate_after_delays_disruption_since_the_last_pod_event",
    ),
    honoured(
        NP,
        "spec.disruption.consolidationPolicy",
        "tests/tests/consolidation.rs::balanced_keeps_a_node_whose_move_saves_too_little_where_the_default_policy_moves_it",
    ),
    honoured(
        NP,
        "spec.limits",
        "tests/tests/provisioning.rs::nodepool_limits_hold",
    ),
    honoured(
        NP,
        "spec.replicas",
        "tests/tests/static_capacity.rs::replicas_are_kept_scaled_capped_and_never_consolidated",
    ),
    honoured(
        NP,
        "spec.weight",
        "karpenter-core/src/scheduling/solver_tests.rs::heavier_pools_win_and_tolerated_taints_admit",
    ),
    honoured(
        NP,
        "spec.template.metadata.labels",
        "tests/tests/drift.rs::nodepool_label_and_taint_changes_drift_exactly_that_pools_nodeclaims",
    ),
    honoured(
        NP,
        "spec.template.metadata.annotations",
        "karpenter-core/src/provisioning/template.rs::template_annotations_reach_the_nodeclaim",
    ),
    honoured(
        NP,
        "spec.template.spec.expireAfter",
        "tests/tests/lifecycle.rs::an_expired_nodeclaim_is_replaced",
    ),
    honoured(
        NP,
        "spec.template.spec.terminationGracePeriod",
        "tests/tests/lifecycle.rs::the_termination_grace_period_deletes_what_will_not_leave",
    ),
    honoured(
        NP,
        "spec.template.spec.nodeClassRef",
        "tests/tests/provisioning.rs::the_kubelet_registers_the_allocatable_the_provisioner_modelled_for_its_node_class",
    ),
    // Another group or kind than karpenter.k8s.aws EC2NodeClass is refused, saying why.
    honoured(
        NP,
        "spec.template.spec.nodeClassRef.group",
        "karpenter-core/src/provisioning/template.rs::a_node_class_ref_of_another_group_or_kind_is_not_provisioned_for",
    ),
    honoured(
        NP,
        "spec.template.spec.nodeClassRef.kind",
        "karpenter-core/src/provisioning/template.rs::a_node_class_ref_of_another_group_or_kind_is_not_provisioned_for",
    ),
    honoured(
        NP,
        "spec.template.spec.requirements",
        "tests/tests/provisioning.rs::the_kubelet_registers_the_allocatable_the_provisioner_modelled_for_its_node_class",
    ),
    honoured(
        NP,
        "spec.template.spec.requirements[].minValues",
        "karpenter/tests/simulate_cli.rs::min_values_policy_strict_leaves_pods_pending_and_best_effort_relaxes",
    ),
    honoured(
        NP,
        "spec.template.spec.taints",
        "tests/tests/drift.rs::nodepool_label_and_taint_changes_drift_exactly_that_pools_nodeclaims",
    ),
    honoured(
        NP,
        "spec.template.spec.startupTaints",
        "karpenter-core/src/lifecycle/initialization.rs::a_nodepools_startup_taints_reach_the_node_and_hold_initialization_until_removed",
    ),
    // NodeClaim: written by Karpenter, and by users who create NodeClaims by hand.
    honoured(
        NC,
        "spec.expireAfter",
        "karpenter-core/src/lifecycle/expiration.rs::expiry_is_creation_plus_expire_after_and_never_means_never",
    ),
    honoured(
        NC,
        "spec.nodeClassRef",
        "tests/tests/provisioning.rs::the_kubelet_registers_the_allocatable_the_provisioner_modelled_for_its_node_class",
    ),
    honoured(
        NC,
        "spec.nodeClassRef.group",
        "tests/tests/provisioning.rs::a_node_class_ref_of_another_group_or_kind_is_refused",
    ),
    honoured(
        NC,
        "spec.nodeClassRef.kind",
        "tests/tests/provisioning.rs::a_node_class_ref_of_another_group_or_kind_is_refused",
    ),
    honoured(
        NC,
        "spec.requirements",
        "controller/src/cloudprovider/sim/tests.rs::on_demand_only_when_spot_is_not_allowed",
    ),
    honoured(
        NC,
        "spec.requirements[].minValues",
        "karpenter-core/src/scheduling/choices_tests.rs::min_values_keep_more_than_60_when_the_cheapest_60_fall_short",
    ),
    honoured(
        NC,
        "spec.resources.requests",
        "controller/src/cloudprovider/sim/tests.rs::launches_the_cheapest_spot_offering_with_kubelet_config",
    ),
    honoured(
        NC,
        "spec.taints",
        "karpenter-core/src/lifecycle/registration.rs::registration_syncs_labels_taints_finalizer_and_owner",
    ),
    honoured(
        NC,
        "spec.startupTaints",
        "karpenter-core/src/lifecycle/initialization.rs::initialization_gates_in_upstream_order",
    ),
    honoured(
        NC,
        "spec.terminationGracePeriod",
        "karpenter-core/src/lifecycle/drain.rs::do_not_disrupt_waits_until_its_window_ends_or_the_termination_time_nears",
    ),
    // EC2NodeClass
    honoured(
        EC2,
        "spec.amiFamily",
        "controller/src/cloudprovider/aws/launchtemplate_tests.rs::the_ami_family_decides_the_bootstrap_format",
    ),
    honoured(
        EC2,
        "spec.amiSelectorTerms[].alias",
        "karpenter/tests/ami_alias_moto.rs::al2023_latest_boots_the_nvidia_image_on_gpu_types_and_the_standard_image_elsewhere",
    ),
    honoured(EC2, "spec.amiSelectorTerms[].id", AMI_TERMS),
    honoured(EC2, "spec.amiSelectorTerms[].name", AMI_TERMS),
    honoured(EC2, "spec.amiSelectorTerms[].owner", AMI_TERMS),
    honoured(EC2, "spec.amiSelectorTerms[].ssmParameter", AMI_TERMS),
    honoured(EC2, "spec.amiSelectorTerms[].tags", AMI_TERMS),
    honoured(
        EC2,
        "spec.subnetSelectorTerms",
        "karpenter/tests/aws_moto.rs::node_class_resolves_subnets_groups_and_the_newest_alias_images",
    ),
    honoured(
        EC2,
        "spec.securityGroupSelectorTerms",
        "karpenter/tests/aws_moto.rs::node_class_resolves_subnets_groups_and_the_newest_alias_images",
    ),
    honoured(
        EC2,
        "spec.securityGroupSelectorTerms[].id",
        "controller/src/cloudprovider/aws/nodeclass_tests.rs::security_group_terms_pick_groups_by_id_and_name_and_they_reach_the_launch_template",
    ),
    honoured(
        EC2,
        "spec.securityGroupSelectorTerms[].name",
        "controller/src/cloudprovider/aws/nodeclass_tests.rs::security_group_terms_pick_groups_by_id_and_name_and_they_reach_the_launch_template",
    ),
    honoured(
        EC2,
        "spec.role",
        "karpenter/tests/aws_moto.rs::node_class_resolves_subnets_groups_and_the_newest_alias_images",
    ),
    honoured(
        EC2,
        "spec.instanceProfile",
        "controller/src/cloudprovider/aws/nodeclass_tests.rs::an_instance_profile_is_used_as_given_and_none_is_created_for_it",
    ),
    honoured(
        EC2,
        "spec.kubelet",
        "controller/src/cloudprovider/aws/launchtemplate_tests.rs::every_family_round_trips_the_kubelet_settings_that_size_the_node",
    ),
    // Passed through to the kubelet by AL2023's NodeConfig; AL2 and Bottlerocket user data do
    // not carry them yet.
    honoured(EC2, "spec.kubelet.clusterDNS", KUBELET_PASS_THROUGH),
    honoured(EC2, "spec.kubelet.cpuCFSQuota", KUBELET_PASS_THROUGH),
    honoured(
        EC2,
        "spec.kubelet.evictionMaxPodGracePeriod",
        KUBELET_PASS_THROUGH,
    ),
    honoured(
        EC2,
        "spec.kubelet.evictionSoftGracePeriod",
        KUBELET_PASS_THROUGH,
    ),
    honoured(
        EC2,
        "spec.kubelet.imageGCHighThresholdPercent",
        KUBELET_PASS_THROUGH,
    ),
    honoured(
        EC2,
        "spec.kubelet.imageGCLowThresholdPercent",
        KUBELET_PASS_THROUGH,
    ),
    honoured(
        EC2,
        "spec.blockDeviceMappings",
        "controller/src/cloudprovider/aws/launchtemplate_tests.rs::block_devices_metadata_options_and_monitoring_reach_the_template",
    ),
    honoured(
        EC2,
        "spec.blockDeviceMappings[].rootVolume",
        "karpenter-core/src/capacity/node_class_tests.rs::ephemeral_storage_comes_from_the_family_device_or_the_root_volume",
    ),
    honoured(
        EC2,
        "spec.blockDeviceMappings[].ebs.volumeInitializationRate",
        "karpenter/tests/launch_template_moto.rs::volume_initialization_rate_reaches_the_template",
    ),
    honoured(
        EC2,
        "spec.metadataOptions",
        "controller/src/cloudprovider/aws/launchtemplate_tests.rs::block_devices_metadata_options_and_monitoring_reach_the_template",
    ),
    honoured(
        EC2,
        "spec.detailedMonitoring",
        "controller/src/cloudprovider/aws/launchtemplate_tests.rs::block_devices_metadata_options_and_monitoring_reach_the_template",
    ),
    honoured(
        EC2,
        "spec.userData",
        "controller/src/cloudprovider/aws/launchtemplate_tests.rs::custom_user_data_is_kept_by_al2023_and_al2",
    ),
    honoured(
        EC2,
        "spec.tags",
        "karpenter/tests/aws_moto.rs::relaunching_the_same_nodeclaim_creates_no_second_instance",
    ),
    // RAID0 is counted as ephemeral storage (node_class_tests.rs::
    // raid0_uses_the_instance_store_in_decimal_gigabytes) and assembled by the user data.
    honoured(
        EC2,
        "spec.instanceStorePolicy",
        "controller/src/cloudprovider/aws/launchtemplate_tests.rs::raid0_assembles_the_instance_store_in_every_familys_user_data",
    ),
    // Both providers: the simulated cloud (this e2e) and the AWS provider
    // (`karpenter/tests/reservations_moto.rs`, on moto).
    honoured(
        EC2,
        "spec.capacityReservationSelectorTerms",
        "tests/tests/capacity_reservations.rs::reserved_capacity_is_used_first_and_again_when_freed",
    ),
    // The launch settings below reach the launch template (or CreateFleet, `context`) on the
    // AWS provider, each shown on moto. The placement group's partitions, partition labels and
    // group-scoped capacity errors are shown in the same file
    // (`a_partition_group_offers_its_partitions_and_labels_the_partition`,
    // `capacity_errors_in_a_placement_group_are_scoped_to_it`,
    // `a_spread_groups_zone_limit_closes_the_zone_for_that_group`).
    honoured(
        EC2,
        "spec.placementGroupSelector",
        "karpenter/tests/launch_template_moto.rs::placement_group_selector_places_and_labels_the_launch",
    ),
    honoured(
        EC2,
        "spec.associatePublicIPAddress",
        "karpenter/tests/launch_template_moto.rs::associate_public_ip_address_reaches_the_primary_interface",
    ),
    honoured(
        EC2,
        "spec.ipPrefixCount",
        "karpenter/tests/launch_template_moto.rs::ip_prefix_count_gives_ipv4_prefixes_or_ipv6_prefixes_on_an_ipv6_cluster",
    ),
    // Also counted as EFA capacity (karpenter-core/src/capacity/node_class_tests.rs).
    honoured(
        EC2,
        "spec.networkInterfaces",
        "karpenter/tests/launch_template_moto.rs::network_interfaces_reach_the_template_as_listed",
    ),
    honoured(
        EC2,
        "spec.connectionTracking",
        "karpenter/tests/launch_template_moto.rs::connection_tracking_reaches_the_primary_interface",
    ),
    honoured(
        EC2,
        "spec.context",
        "karpenter/tests/launch_template_moto.rs::context_reaches_create_fleet",
    ),
    honoured(
        EC2,
        "spec.cpuOptions",
        "karpenter/tests/launch_template_moto.rs::cpu_options_reach_the_template",
    ),
    // NodeOverlay: applied wherever a NodePool's instance types are read (behind its gate).
    honoured(
        NO,
        "spec.requirements",
        "karpenter-core/src/capacity/overlay_tests/changes.rs::template_labels_match_but_undefined_labels_do_not",
    ),
    honoured(
        NO,
        "spec.price",
        "karpenter-core/src/capacity/overlay_tests/changes.rs::price_overlays_by_nodepool",
    ),
    honoured(
        NO,
        "spec.priceAdjustment",
        "karpenter-core/src/capacity/overlay_tests/changes.rs::prices_clamp_at_zero_and_percentages_follow_the_cloud_price",
    ),
    honoured(
        NO,
        "spec.capacity",
        "karpenter-core/src/capacity/overlay_tests/changes.rs::capacity_is_set_per_type_and_allocatable_follows",
    ),
    honoured(
        NO,
        "spec.weight",
        "karpenter-core/src/capacity/overlay_tests/changes.rs::only_the_highest_weight_price_applies",
    ),
];

/// A setting (environment variable of `karpenter run` and `karpenter sandbox`) or feature gate,
/// and the test that proves it takes effect, or why it does not yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SettingSupport {
    /// The environment variable (`BATCH_IDLE_DURATION`) or the gate (`NodeRepair`).
    pub name: &'static str,
    /// `FILE::function` of the test that proves it, or `Err(why)` while it is not honoured.
    pub support: Result<&'static str, &'static str>,
}

const fn setting(name: &'static str, proof: &'static str) -> SettingSupport {
    SettingSupport {
        name,
        support: Ok(proof),
    }
}

/// Every environment variable `karpenter run` reads (its flags have the same names in
/// kebab case), with the test that proves it takes effect; the controller's test checks the list
/// against its flags.
pub const SETTINGS: &[SettingSupport] = &[
    setting(
        "CLUSTER_NAME",
        "karpenter/tests/aws_moto.rs::the_sandbox_command_runs_on_ec2_with_credentials_from_the_environment",
    ),
    setting(
        "BATCH_IDLE_DURATION",
        "controller/src/provisioning/batch.rs::the_window_closes_idle_after_the_last_pod_or_at_the_maximum",
    ),
    setting(
        "BATCH_MAX_DURATION",
        "controller/src/provisioning/batch.rs::the_window_closes_idle_after_the_last_pod_or_at_the_maximum",
    ),
    setting(
        "LAUNCH_TIMEOUT",
        "tests/tests/lifecycle.rs::a_nodeclaim_that_never_launches_is_deleted_after_the_launch_timeout",
    ),
    setting(
        "REGISTRATION_TTL",
        "tests/tests/lifecycle.rs::a_node_that_never_registers_is_deleted_after_the_registration_ttl",
    ),
    setting(
        "ORPHANED_NODE_GRACE",
        "tests/tests/lifecycle.rs::garbage_collection_both_ways_and_orphaned_nodes",
    ),
    setting(
        "UPGRADE_INITIALIZATION_TIMEOUT",
        "tests/tests/upgrade.rs::a_replacement_that_never_initializes_is_rolled_back_and_the_rollout_stops",
    ),
    setting(
        "FEATURE_GATES",
        "tests/tests/static_capacity.rs::with_the_gate_off_replicas_are_reported_not_honoured",
    ),
    setting(
        "MIN_VALUES_POLICY",
        "tests/tests/min_values_policy.rs::best_effort_launches_with_relaxed_min_values_and_says_so",
    ),
    setting(
        "COST_REPACK",
        "tests/tests/provisioning.rs::a_planned_gpu_node_gets_its_gpu_pod_although_cpu_pods_were_pending_too",
    ),
    setting(
        "CPU_REQUESTS",
        "controller/src/nodeclaim/lifecycle.rs::launches_and_creates_at_once_scale_with_cpu_requests",
    ),
    setting(
        "NOMINATE_PLANNED_PODS",
        "tests/tests/provisioning.rs::a_planned_gpu_node_gets_its_gpu_pod_although_cpu_pods_were_pending_too",
    ),
    setting(
        "LOG_LEVEL",
        "controller/src/runtime/logging.rs::log_format_and_log_level_decide_what_is_written",
    ),
    setting(
        "LOG_FORMAT",
        "controller/src/runtime/logging.rs::log_format_and_log_level_decide_what_is_written",
    ),
    setting(
        "METRICS_PORT",
        "tests/tests/leader_election.rs::health_readiness_and_metrics_answer",
    ),
    setting(
        "HEALTH_PROBE_PORT",
        "tests/tests/leader_election.rs::health_readiness_and_metrics_answer",
    ),
    setting(
        "BIND_ADDRESS",
        "tests/tests/leader_election.rs::health_readiness_and_metrics_answer",
    ),
    setting(
        "KUBE_CLIENT_QPS",
        "controller/src/runtime/mod.rs::the_client_rate_limit_allows_a_burst_then_qps",
    ),
    setting(
        "KUBE_CLIENT_BURST",
        "controller/src/runtime/mod.rs::the_client_rate_limit_allows_a_burst_then_qps",
    ),
    setting(
        "DISABLE_LEADER_ELECTION",
        "controller/src/runtime/options.rs::disable_leader_election_takes_go_booleans",
    ),
    setting(
        "LEADER_ELECTION_NAME",
        "tests/tests/leader_election.rs::only_the_leader_acts_and_a_standby_takes_over_after_it_crashes",
    ),
    setting(
        "LEADER_ELECTION_NAMESPACE",
        "controller/src/runtime/options.rs::lease_namespace_comes_from_the_flag_then_the_pod",
    ),
    setting(
        "LEADER_ELECTION_LEASE_DURATION",
        "tests/tests/leader_election.rs::a_leader_that_cannot_renew_stops_before_its_lease_expires",
    ),
    setting(
        "LEADER_ELECTION_RENEW_DEADLINE",
        "tests/tests/leader_election.rs::a_leader_that_cannot_renew_stops_before_its_lease_expires",
    ),
    setting(
        "LEADER_ELECTION_RETRY_PERIOD",
        "tests/tests/leader_election.rs::a_leader_whose_lease_is_taken_stops_acting",
    ),
    setting(
        "CLOUD_PROVIDER",
        "karpenter/tests/aws_moto.rs::the_sandbox_command_runs_on_ec2_with_credentials_from_the_environment",
    ),
    setting(
        "AWS_ENDPOINT_URL",
        "karpenter/tests/aws_moto.rs::the_sandbox_command_runs_on_ec2_with_credentials_from_the_environment",
    ),
    setting(
        "CLUSTER_ENDPOINT",
        "controller/src/cloudprovider/aws/cluster.rs::settings_win_and_describe_cluster_fills_in_the_rest",
    ),
    setting(
        "CLUSTER_CA_BUNDLE",
        "controller/src/cloudprovider/aws/cluster.rs::settings_win_and_describe_cluster_fills_in_the_rest",
    ),
    setting(
        "INTERRUPTION_QUEUE",
        "tests/tests/interruption_queue.rs::interruption_messages_are_handled_once_and_deleted",
    ),
    setting(
        "AWS_REGION",
        "controller/src/cloudprovider/sim/tests.rs::an_account_in_another_region_launches_in_its_zones",
    ),
    setting(
        "ISOLATED_VPC",
        "controller/src/cloudprovider/aws/pricing.rs::an_isolated_vpc_keeps_the_vendored_table_without_asking",
    ),
    setting(
        "RESERVED_ENIS",
        "karpenter-core/src/capacity/node_class_tests.rs::reserved_enis_never_go_below_zero",
    ),
    setting(
        "VM_MEMORY_OVERHEAD_PERCENT",
        "karpenter-core/src/capacity/node_class_tests.rs::vm_memory_overhead_percent_takes_that_share_of_memory",
    ),
];

/// Every feature gate upstream accepts; the controller's test checks the list against its enum.
pub const GATES: &[SettingSupport] = &[
    setting(
        "SpotToSpotConsolidation",
        "tests/tests/consolidation.rs::spot_nodes_are_replaced_with_spot_only_behind_the_feature_gate",
    ),
    setting(
        "NodeRepair",
        "tests/tests/repair.rs::a_failed_node_is_replaced_unless_too_many_of_its_nodepool_fail",
    ),
    SettingSupport {
        name: "StaticCapacity",
        support: Ok(
            "tests/tests/static_capacity.rs::replicas_are_kept_scaled_capped_and_never_consolidated",
        ),
    },
    setting(
        "NodeOverlay",
        "tests/tests/node_overlay.rs::overlays_change_prices_and_capacity_and_conflicts_are_reported",
    ),
    SettingSupport {
        name: "ReservedCapacity",
        support: Err(
            "capacity reservations are honoured by both providers, but on-demand and spot launches \
             are not opted out of open reservations (upstream's launch templates set \
             CapacityReservationPreference none with the gate on), and interruptible \
             reservations are not offered",
        ),
    },
    SettingSupport {
        name: "CapacityBuffer",
        support: Err("CapacityBuffer objects are not read; no buffer capacity is kept"),
    },
];

/// Why the gate `name` is not honoured yet, or `None` when it is (or is unknown).
pub fn gate_report(name: &str) -> Option<&'static str> {
    GATES
        .iter()
        .find(|g| g.name == name)
        .and_then(|g| g.support.err())
}

/// Whether `FILE::function` (FILE relative to `root`, the repository) names a function defined
/// in that file.
///
/// Errors: the proof is not `FILE::function`, the file cannot be read, or defines no such
/// function; the message names which.
pub fn proof_exists(root: &std::path::Path, proof: &str) -> Result<(), String> {
    let (file, function) = proof
        .rsplit_once("::")
        .ok_or_else(|| format!("{proof:?} is not FILE::function"))?;
    let text = std::fs::read_to_string(root.join(file))
        .map_err(|e| format!("{proof}: {file} cannot be read: {e}"))?;
    if text.contains(&format!("fn {function}(")) {
        Ok(())
    } else {
        Err(format!("{proof}: no fn {function} in {file}"))
    }
}

/// The fields of `kind` that `spec` (the object's `spec` as JSON) sets and this project does not
/// honour yet, each with why, in [`FIELDS`] order: what the object's `UnsupportedField` Event
/// lists.
pub fn unsupported(kind: &str, spec: &Value) -> Vec<(&'static str, &'static str)> {
    let root = Value::Object([("spec".to_owned(), spec.clone())].into_iter().collect());
    FIELDS
        .iter()
        .filter(|f| f.kind == kind)
        .filter_map(|f| {
            let report = f.reported?;
            let segments: Vec<&str> = f.path.split('.').collect();
            set_at(&root, &segments, report.value).then_some((f.path, report.why))
        })
        .collect()
}

/// Whether the value at `path` (segments; `name[]` descends into every array item) is set:
/// present, not null, not an empty string, list or map; and equal to `value` when given.
fn set_at(v: &Value, path: &[&str], value: Option<&str>) -> bool {
    let Some((first, rest)) = path.split_first() else {
        return match v {
            Value::Null => false,
            Value::String(s) => !s.is_empty() && value.is_none_or(|want| s == want),
            Value::Array(a) => !a.is_empty() && value.is_none(),
            Value::Object(o) => !o.is_empty() && value.is_none(),
            _ => value.is_none(),
        };
    };
    match first.strip_suffix("[]") {
        Some(name) => v
            .get(name)
            .and_then(Value::as_array)
            .is_some_and(|items| items.iter().any(|i| set_at(i, rest, value))),
        None => v
            .get(*first)
            .is_some_and(|child| set_at(child, rest, value)),
    }
}

/// The entry covering `leaf` of `kind`: the one whose path is `leaf` or its longest prefix at a
/// segment boundary.
pub fn covering(kind: &str, leaf: &str) -> Option<&'static FieldSupport> {
    FIELDS
        .iter()
        .filter(|f| f.kind == kind)
        .filter(|f| {
            leaf == f.path
                || leaf
                    .strip_prefix(f.path)
                    .is_some_and(|rest| rest.starts_with('.') || rest.starts_with("[]"))
        })
        .max_by_key(|f| f.path.len())
}

/// The message of an `UnsupportedField` Event: `<path>: <why>; <path>: <why>`, one pair per
/// field set and not honoured.
pub fn message(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(path, why)| format!("{path}: {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_value_counts_only_when_set_and_matching() {
        let path = ["spec", "disruption", "consolidationPolicy"];
        let object =
            |policy: &str| json!({"spec": {"disruption": {"consolidationPolicy": policy}}});
        assert!(set_at(&object("Balanced"), &path, Some("Balanced")));
        assert!(!set_at(&object("WhenEmpty"), &path, Some("Balanced")));
        assert!(set_at(&object("WhenEmpty"), &path, None));
        assert!(!set_at(&json!({"spec": {}}), &path, Some("Balanced")));
        // Every policy is honoured now: none is reported.
        let spec = json!({"disruption": {"consolidationPolicy": "Balanced"}});
        assert!(unsupported(NP, &spec).is_empty());
    }

    #[test]
    fn arrays_and_empty_values() {
        let path = ["spec", "terms[]", "id"];
        let root = |terms: Value| json!({"spec": {"terms": terms}});
        assert!(set_at(&root(json!([{"id": "cr-1"}])), &path, None));
        assert!(!set_at(&root(json!([{"id": ""}])), &path, None));
        assert!(!set_at(&root(json!([])), &path, None));
        assert!(set_at(
            &json!({"spec": {"on": false}}),
            &["spec", "on"],
            None
        ));
    }

    #[test]
    fn the_longest_prefix_covers_a_leaf() {
        let f = covering(NP, "spec.disruption.budgets[].nodes").expect("covered");
        assert_eq!(f.path, "spec.disruption.budgets");
        assert!(covering(NP, "spec.disruption.budgetsX").is_none());
        let _ = (NC, EC2, NO);
    }
}

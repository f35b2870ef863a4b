//! Condition reasons Karpenter sets, as upstream spells them (`pkg/controllers/**`,
//! `aws:pkg/controllers/nodeclass/*`, `awslabs/operatorpkg status/condition_set.go`).

/// A condition that has not been reconciled yet.
pub const AWAITING_RECONCILIATION: &str = "AwaitingReconciliation";
/// Message that goes with [`AWAITING_RECONCILIATION`].
pub const AWAITING_RECONCILIATION_MESSAGE: &str = "object is awaiting reconciliation";
/// Root condition is Unknown because some dependent is not yet True.
pub const RECONCILING_DEPENDENTS: &str = "ReconcilingDependents";
/// Root condition is False because a dependent is False.
pub const UNHEALTHY_DEPENDENTS: &str = "UnhealthyDependents";

/// NodePool `ValidationSucceeded=False` (`nodepool/validation`).
pub const NODEPOOL_VALIDATION_FAILED: &str = "NodePoolValidationFailed";
/// NodePool `NodeClassReady=False`: the node class does not exist.
pub const NODE_CLASS_NOT_FOUND: &str = "NodeClassNotFound";
/// NodePool `NodeClassReady=False`: the node class is being deleted.
pub const NODE_CLASS_TERMINATING: &str = "NodeClassTerminating";
/// NodePool `NodeClassReady=False`: the node class has no Ready condition.
pub const NODE_CLASS_READINESS_UNKNOWN: &str = "NodeClassReadinessUnknown";
/// NodePool `NodeRegistrationHealthy=False`.
pub const REGISTRATION_FAILED: &str = "RegistrationFailed";

/// NodeClaim `Launched=Unknown` after a generic create error.
pub const LAUNCH_FAILED: &str = "LaunchFailed";
/// NodeClaim `Registered`/`Initialized=Unknown`: no Node yet.
pub const NODE_NOT_FOUND: &str = "NodeNotFound";
/// NodeClaim `Registered=False`: more than one Node has the providerID.
pub const MULTIPLE_NODES_FOUND: &str = "MultipleNodesFound";
/// NodeClaim `Registered=Unknown`: a provider registration hook has not passed.
pub const REGISTRATION_HOOK_PENDING: &str = "RegistrationHookPending";
/// NodeClaim `Initialized=Unknown`: the Node is not Ready.
pub const NODE_NOT_READY: &str = "NodeNotReady";
/// NodeClaim `Initialized=Unknown`: a startup taint is still on the Node.
pub const STARTUP_TAINTS_EXIST: &str = "StartupTaintsExist";
/// NodeClaim `Initialized=Unknown`: a known ephemeral taint is still on the Node.
pub const KNOWN_EPHEMERAL_TAINTS_EXIST: &str = "KnownEphemeralTaintsExist";
/// NodeClaim `Initialized=Unknown`: a requested resource has zero allocatable.
pub const RESOURCE_NOT_REGISTERED: &str = "ResourceNotRegistered";
/// NodeClaim `Initialized=Unknown`: a DRA driver has not published its pools.
pub const DRA_DRIVER_POOLS_NOT_PUBLISHED: &str = "DRADriverPoolsNotPublished";
/// NodeClaim `Drained=Unknown` while pods are evicted.
pub const DRAINING: &str = "Draining";
/// NodeClaim `VolumesDetached=Unknown` while volume attachments remain.
pub const AWAITING_VOLUME_DETACHMENT: &str = "AwaitingVolumeDetachment";
/// NodeClaim `VolumesDetached=False`: gave up waiting at the termination grace period.
pub const TERMINATION_GRACE_PERIOD_ELAPSED: &str = "TerminationGracePeriodElapsed";
/// NodeClaim `ConsistentStateFound=False`.
pub const CONSISTENCY_CHECK_FAILED: &str = "ConsistencyCheckFailed";
/// NodeClaim `Drifted=True`: the NodePool template hash changed.
pub const NODEPOOL_DRIFTED: &str = "NodePoolDrifted";
/// NodeClaim `Drifted=True`: the NodeClaim no longer satisfies the NodePool requirements.
pub const REQUIREMENTS_DRIFTED: &str = "RequirementsDrifted";
/// NodeClaim `Drifted=True`: its instance type is no longer offered.
pub const INSTANCE_TYPE_NOT_FOUND: &str = "InstanceTypeNotFound";
/// NodeClaim `Drifted=True` (AWS): the EC2NodeClass hash changed.
pub const NODE_CLASS_DRIFT: &str = "NodeClassDrift";
/// NodeClaim `Drifted=True` (AWS): the resolved AMIs no longer include the instance's image.
pub const AMI_DRIFT: &str = "AMIDrift";
/// NodeClaim `Drifted=True` (AWS): the subnet is no longer selected.
pub const SUBNET_DRIFT: &str = "SubnetDrift";
/// NodeClaim `Drifted=True` (AWS): the security groups changed.
pub const SECURITY_GROUP_DRIFT: &str = "SecurityGroupDrift";
/// NodeClaim `Drifted=True` (AWS): the capacity reservation is no longer selected.
pub const CAPACITY_RESERVATION_DRIFT: &str = "CapacityReservationDrift";
/// NodeClaim `Drifted=True` (AWS): the placement group changed.
pub const PLACEMENT_GROUP_DRIFT: &str = "PlacementGroupDrift";

/// EC2NodeClass `AMIsReady=False`: the selector matched nothing.
pub const AMI_NOT_FOUND: &str = "AMINotFound";
/// EC2NodeClass `AMIsReady=False`: the alias is not supported.
pub const UNSUPPORTED_ALIAS: &str = "UnsupportedAlias";
/// EC2NodeClass `SubnetsReady=False`.
pub const SUBNETS_NOT_FOUND: &str = "SubnetsNotFound";
/// EC2NodeClass `SecurityGroupsReady=False`.
pub const SECURITY_GROUPS_NOT_FOUND: &str = "SecurityGroupsNotFound";
/// EC2NodeClass `PlacementGroupReady=False`: lookup failed.
pub const PLACEMENT_GROUP_RESOLUTION_FAILED: &str = "PlacementGroupResolutionFailed";
/// EC2NodeClass `PlacementGroupReady=False`: no such placement group.
pub const PLACEMENT_GROUP_NOT_FOUND: &str = "PlacementGroupNotFound";
/// EC2NodeClass `ValidationSucceeded=False`: CreateFleet dry run denied.
pub const CREATE_FLEET_AUTH_CHECK_FAILED: &str = "CreateFleetAuthCheckFailed";
/// EC2NodeClass `ValidationSucceeded=False`: CreateLaunchTemplate dry run denied.
pub const CREATE_LAUNCH_TEMPLATE_AUTH_CHECK_FAILED: &str = "CreateLaunchTemplateAuthCheckFailed";
/// EC2NodeClass `ValidationSucceeded=False`: RunInstances dry run denied.
pub const RUN_INSTANCES_AUTH_CHECK_FAILED: &str = "RunInstancesAuthCheckFailed";
/// EC2NodeClass `ValidationSucceeded=False`: the instance profile does not exist.
pub const INSTANCE_PROFILE_NOT_FOUND: &str = "InstanceProfileNotFound";
/// EC2NodeClass `ValidationSucceeded=Unknown`: other conditions are not ready yet.
pub const DEPENDENCIES_NOT_READY: &str = "DependenciesNotReady";
/// EC2NodeClass `ValidationSucceeded=False`: a restricted tag is set.
pub const TAG_VALIDATION_FAILED: &str = "TagValidationFailed";
/// EC2NodeClass `ValidationSucceeded=False`: the spec breaks a rule of the CRD (e.g. both
/// `role` and `instanceProfile`) that the API server did not enforce. Ours: upstream's CRD
/// keeps such objects out with CEL and has no reason for them.
pub const NODE_CLASS_VALIDATION_FAILED: &str = "NodeClassValidationFailed";
/// EC2NodeClass `ValidationSucceeded=False`: `spec.kubelet` is invalid.
pub const INVALID_KUBELET_CONFIGURATION: &str = "InvalidKubeletConfiguration";
/// EC2NodeClass `ValidationSucceeded=False`: `spec.kubelet` is not supported by the AMI family.
pub const UNSUPPORTED_KUBELET_CONFIGURATION: &str = "UnsupportedKubeletConfiguration";
/// EC2NodeClass `ValidationSucceeded=False`: user data exceeds EC2's limit.
pub const USER_DATA_SIZE_LIMIT_EXCEEDED: &str = "UserDataSizeLimitExceeded";

/// NodeOverlay `ValidationSucceeded=False`: the spec breaks a rule; the message is the
/// validation error (`pkg/controllers/nodeoverlay/controller.go`).
pub const RUNTIME_VALIDATION: &str = "RuntimeValidation";
/// NodeOverlay `ValidationSucceeded=False`: an overlay of the same weight, processed first,
/// changes the same offering's price or the same resource; this overlay is not applied.
pub const CONFLICT: &str = "Conflict";
/// Message that goes with [`CONFLICT`].
pub const CONFLICT_MESSAGE: &str = "conflict with another overlay";

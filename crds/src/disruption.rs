//! Annotations of consolidation commands in progress (an extension of this project; upstream
//! keeps its command queue in memory). A command's whole state lives on its NodeClaims, so a
//! restarted controller finishes or rolls back the command it finds instead of starting a
//! second one, and the in-progress set every disruption method consults is read from the
//! cluster: candidates carry [`COMMAND_ANNOTATION`], [`REASON_ANNOTATION`],
//! [`REPLACEMENT_ANNOTATION`] and [`STARTED_ANNOTATION`] (an interruption's also
//! [`DRAIN_BY_ANNOTATION`]); the replacement carries
//! [`COMMAND_ANNOTATION`] and [`REPLACES_ANNOTATION`].

/// The command a NodeClaim belongs to: `<reason>-<5 letters>`, e.g. `underutilized-x7k2p`.
pub const COMMAND_ANNOTATION: &str = "disruption.karpenter.sh/command";
/// On a candidate: why it is disrupted (`Empty` or `Underutilized`, upstream's budget reasons).
pub const REASON_ANNOTATION: &str = "disruption.karpenter.sh/reason";
/// On a candidate: the name of the NodeClaim that replaces it; empty when it is only deleted.
pub const REPLACEMENT_ANNOTATION: &str = "disruption.karpenter.sh/replacement";
/// On a candidate: when the command started (RFC 3339), for the replacement's timeout.
pub const STARTED_ANNOTATION: &str = "disruption.karpenter.sh/started";
/// On a candidate of a forceful command (an interruption): when its drain starts at the
/// latest (RFC 3339), whether or not its replacement is ready by then.
pub const DRAIN_BY_ANNOTATION: &str = "disruption.karpenter.sh/drain-by";
/// On a replacement: the comma-separated names of the NodeClaims it replaces.
pub const REPLACES_ANNOTATION: &str = "disruption.karpenter.sh/replaces";

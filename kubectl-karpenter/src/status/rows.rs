//! The NodeClaim rows of `kubectl karpenter status`: one per NodeClaim, with its lifecycle state
//! (Launching → Registering → Initializing → Ready, then Drifted, Unhealthy, Interrupted or
//! Terminating) derived from its status conditions, its node's and its disruption annotations,
//! and the totals that count ready, drifted, unhealthy, interrupted and in-flight capacity and
//! its hourly cost. Pure: everything comes in as arguments, including `now` and the price book.

use std::fmt;

use crds::NodeClaim;
use crds::conditions::{self, DISRUPTION_REASON, DRIFTED, INITIALIZED, LAUNCHED, REGISTERED};
use crds::disruption::{DRAIN_BY_ANNOTATION, REASON_ANNOTATION};
use crds::labels::{
    CAPACITY_RESERVATION_ID_LABEL, CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL,
    TOPOLOGY_REGION_LABEL, TOPOLOGY_ZONE_LABEL,
};
use jiff::Timestamp;
use karpenter_core::interruption::Kind;
use serde::Serialize;

use karpenter_core::lifecycle::repair::Unhealthy;

use super::limits::{LimitedBy, Sizing};
use super::load::{Allocatable, Amounts, Loads};
use crate::age;

/// Where a NodeClaim is in its lifecycle, as the STATE column shows it. Ordered as the
/// lifecycle runs (what `--sort-by state` uses); serialized as the column text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum State {
    /// Waiting for the cloud provider to create the instance (`Launched` is not True).
    Launching,
    /// The instance exists; waiting for its Node to join (`Registered` is not True).
    Registering,
    /// The Node joined; waiting for it to be ready and untainted (`Initialized` is not True).
    Initializing,
    /// Launched, registered and initialized.
    Ready,
    /// Ready, but its `Drifted` condition is True: no longer what its NodePool or node class
    /// would launch, so the upgrade will replace it.
    Drifted,
    /// Its node reports a condition one of node repair's policies matches (e.g.
    /// `Ready=False`), drifted or not; node repair (feature gate `NodeRepair`) replaces it once
    /// the policy's toleration has run out. An initializing node counts only after that: nodes
    /// are expected to be NotReady for a while as they boot.
    Unhealthy,
    /// Its instance is interrupted (EC2 reclaims the spot instance, a scheduled change retires
    /// it, it is stopping or terminating) and Karpenter is replacing it: its disruption reason
    /// ([`REASON_ANNOTATION`]) is an interruption's ([`interruption_reason`]), whatever its
    /// conditions say.
    Interrupted,
    /// Being deleted (has a deletionTimestamp), whatever its conditions say.
    Terminating,
}

impl State {
    /// Derives the state from the NodeClaim's deletionTimestamp, disruption reason and
    /// conditions: Terminating wins, then Interrupted, then the first of Launched, Registered,
    /// Initialized that is not True; a ready NodeClaim with `Drifted=True` is Drifted.
    pub fn of(claim: &NodeClaim) -> State {
        if claim.metadata.deletion_timestamp.is_some() {
            return State::Terminating;
        }
        if interruption_reason(claim).is_some() {
            return State::Interrupted;
        }
        let conds = claim.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
        if !conditions::is_true(conds, LAUNCHED) {
            State::Launching
        } else if !conditions::is_true(conds, REGISTERED) {
            State::Registering
        } else if !conditions::is_true(conds, INITIALIZED) {
            State::Initializing
        } else if conditions::is_true(conds, DRIFTED) {
            State::Drifted
        } else {
            State::Ready
        }
    }

    /// The column text.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Launching => "Launching",
            State::Registering => "Registering",
            State::Initializing => "Initializing",
            State::Ready => "Ready",
            State::Drifted => "Drifted",
            State::Unhealthy => "Unhealthy",
            State::Interrupted => "Interrupted",
            State::Terminating => "Terminating",
        }
    }

    /// The state of a NodeClaim in `state` ([`State::of`]) whose node matches a repair policy
    /// as `unhealthy` says, at `now`: Ready and Drifted become Unhealthy; Initializing does once
    /// the policy's toleration has run out; the others stay.
    pub fn with_health(state: State, unhealthy: Option<&Unhealthy>, now: Timestamp) -> State {
        match (state, unhealthy) {
            (State::Ready | State::Drifted, Some(_)) => State::Unhealthy,
            (State::Initializing, Some(u)) if u.is_due(now) => State::Unhealthy,
            _ => state,
        }
    }

    /// Whether the NodeClaim is on its way (launching, registering or initializing).
    pub fn in_flight(self) -> bool {
        matches!(
            self,
            State::Launching | State::Registering | State::Initializing
        )
    }
}

/// The interruption a NodeClaim is being replaced for: its [`REASON_ANNOTATION`] when that is
/// an interruption's disruption reason (`SpotInterrupted`, `ScheduledChange`,
/// `InstanceStopped`, `InstanceTerminated`: [`Kind::history_reason`]).
pub fn interruption_reason(claim: &NodeClaim) -> Option<&'static str> {
    annotation(claim, REASON_ANNOTATION)
        .and_then(|r| Kind::from_history_reason(&r))
        .and_then(Kind::history_reason)
}

/// Why Karpenter is disrupting `claim`: the reason of the disruption command that holds it
/// ([`REASON_ANNOTATION`]), else the reason of its `DisruptionReason` condition when True (the
/// controller sets it just before it deletes the NodeClaim, e.g. `Empty`, `Drifted`, `Expired`,
/// `Unhealthy`); `None` when neither says.
pub fn disruption_reason(claim: &NodeClaim) -> Option<String> {
    annotation(claim, REASON_ANNOTATION).or_else(|| {
        let conds = claim.status.as_ref().map_or(&[][..], |s| &s.conditions[..]);
        conditions::get(conds, DISRUPTION_REASON)
            .filter(|c| c.status == "True" && !c.reason.is_empty())
            .map(|c| c.reason.clone())
    })
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Hourly prices of offerings (instance type, region, zone, capacity type), in USD.
pub trait PriceBook {
    /// The price of one instance, or `None` when it is not known. `region` is the
    /// `topology.kubernetes.io/region` the instance is in, when known.
    fn hourly_price(
        &self,
        instance_type: &str,
        region: Option<&str>,
        zone: Option<&str>,
        capacity_type: Option<&str>,
    ) -> Option<f64>;
}

/// A price book that knows no prices (used when the embedded catalog cannot be read).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoPrices;

impl PriceBook for NoPrices {
    fn hourly_price(
        &self,
        _: &str,
        _: Option<&str>,
        _: Option<&str>,
        _: Option<&str>,
    ) -> Option<f64> {
        None
    }
}

/// One NodeClaim as the table shows it; `None` prints as `<none>` (and as `null` in JSON and
/// YAML, so every key is always present).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// NodeClaim name.
    pub name: String,
    /// `karpenter.sh/nodepool` label.
    #[serde(rename = "nodePool")]
    pub nodepool: Option<String>,
    /// Lifecycle state from its deletionTimestamp and conditions, and its node's health
    /// ([`State::of`], [`State::with_health`]).
    pub state: State,
    /// `node.kubernetes.io/instance-type` label.
    pub instance_type: Option<String>,
    /// `karpenter.sh/capacity-type` label.
    pub capacity_type: Option<String>,
    /// `karpenter.k8s.aws/capacity-reservation-id` label: the capacity reservation a
    /// `reserved` NodeClaim runs in (`cr-...`).
    pub reservation_id: Option<String>,
    /// `topology.kubernetes.io/zone` label.
    pub zone: Option<String>,
    /// Name of the Node that registered for it.
    pub node: Option<String>,
    /// Pods bound to its node and not Succeeded or Failed, DaemonSet and static pods included
    /// (as eks-node-viewer counts them); 0 without a node.
    pub pods: usize,
    /// Of `pods`, those consolidation would have to move (not DaemonSet or static pods, not
    /// being deleted); 0 on a node that has any is an empty node in upstream's sense.
    pub reschedulable_pods: usize,
    /// The summed requests of `pods` as kube-scheduler counts them (`cpu` in millicores,
    /// `memory` in bytes); zero without a node.
    pub requests: Amounts,
    /// What pods may use of its node (`cpu` in millicores, `memory` in bytes): the Node's
    /// `status.allocatable`, else the NodeClaim's (in flight, before its Node joins); `null`
    /// when neither is known (not launched yet).
    pub allocatable: Option<Allocatable>,
    /// Which of pods, cpu and memory is closest to full on its node, and why the node holds
    /// that much under its node class ([`LimitedBy`]); `null` when the allocatable is not
    /// known (not launched yet).
    pub limited_by: Option<LimitedBy>,
    /// Hourly price of its offering in USD, when known.
    #[serde(rename = "pricePerHour")]
    pub price: Option<f64>,
    /// Creation time (RFC 3339).
    pub created: Option<Timestamp>,
    /// Age, formatted like kubectl.
    pub age: String,
    /// Name of its node class (`spec.nodeClassRef.name`).
    pub node_class: Option<String>,
    /// Cloud provider id of the instance.
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    /// Why Karpenter is disrupting it, while a disruption (consolidation, interruption, drift,
    /// expiry, repair) is under way ([`disruption_reason`]), e.g. `Underutilized`, `Empty` or
    /// `SpotInterrupted`.
    pub disruption_reason: Option<String>,
    /// When its drain starts at the latest, replacement ready or not (an interrupted
    /// NodeClaim's [`DRAIN_BY_ANNOTATION`]).
    pub drain_by: Option<Timestamp>,
    /// The condition of its node that a repair policy matches, if one does.
    pub unhealthy: Option<Health>,
    /// Whether its node carries the `karpenter.sh/disrupted:NoSchedule` taint, which Karpenter
    /// puts on a node it has begun to disrupt or terminate (no new pods land there).
    pub disrupted_taint: bool,
}

/// A node condition node repair acts on, as `status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// `Type=Status`, e.g. `Ready=False`.
    pub condition: String,
    /// The condition's lastTransitionTime (RFC 3339); `null` when the node does not say.
    pub since: Option<Timestamp>,
    /// How long the repair policy tolerates it, like kubectl's ages (`30m`).
    pub toleration: String,
    /// When node repair replaces the node, with the `NodeRepair` gate on and while no more than
    /// 20% of its NodePool's nodes are unhealthy: `since` plus the toleration; `null` when
    /// `since` is unknown (at once).
    pub repair_after: Option<Timestamp>,
}

impl Health {
    /// The health of a node matching `u`.
    pub fn of(u: &Unhealthy) -> Health {
        let toleration = jiff::SignedDuration::try_from(u.policy.toleration).unwrap_or_default();
        Health {
            condition: u.policy.condition(),
            since: u.since,
            toleration: crds::duration::human_duration(toleration),
            repair_after: u.since.map(|_| u.due_at()),
        }
    }
}

fn label(claim: &NodeClaim, key: &str) -> Option<String> {
    claim
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .filter(|v| !v.is_empty())
        .cloned()
}

fn annotation(claim: &NodeClaim, key: &str) -> Option<String> {
    claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .filter(|v| !v.is_empty())
        .cloned()
}

fn non_empty(value: Option<&String>) -> Option<String> {
    value.filter(|v| !v.is_empty()).cloned()
}

impl Row {
    /// The CAPACITY-TYPE cell: the capacity type, with the reservation of a reserved NodeClaim
    /// (`reserved (cr-0123456789abcdef0)`).
    pub fn capacity_cell(&self) -> Option<String> {
        match (&self.capacity_type, &self.reservation_id) {
            (Some(t), Some(id)) => Some(format!("{t} ({id})")),
            (t, _) => t.clone(),
        }
    }

    /// Builds the row of one NodeClaim as seen at `now`, with the pods and allocatable of its
    /// node from `loads` and what limits the node explained by `sizing` (from its
    /// `spec.nodeClassRef.name` and instance type label).
    pub fn of(
        claim: &NodeClaim,
        now: Timestamp,
        prices: &dyn PriceBook,
        loads: &Loads,
        sizing: &Sizing,
    ) -> Row {
        let instance_type = label(claim, INSTANCE_TYPE_LABEL);
        let capacity_type = label(claim, CAPACITY_TYPE_LABEL);
        let zone = label(claim, TOPOLOGY_ZONE_LABEL);
        let region = label(claim, TOPOLOGY_REGION_LABEL);
        let price = instance_type.as_deref().and_then(|t| {
            prices.hourly_price(
                t,
                region.as_deref(),
                zone.as_deref(),
                capacity_type.as_deref(),
            )
        });
        let status = claim.status.as_ref();
        let created = claim.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let load = loads.of_claim(claim);
        let node_class = non_empty(Some(&claim.spec.node_class_ref.name));
        let allocation = node_class
            .as_deref()
            .zip(instance_type.as_deref())
            .and_then(|(class, itype)| sizing.allocation(class, itype));
        let limited_by = LimitedBy::of(load.pods.pods, load.pods.requests, load.allocatable)
            .map(|l| l.explained(allocation.as_ref()));
        let unhealthy = loads.unhealthy_of(claim);
        Row {
            name: claim.metadata.name.clone().unwrap_or_default(),
            nodepool: label(claim, NODEPOOL_LABEL),
            state: State::with_health(State::of(claim), unhealthy, now),
            instance_type,
            capacity_type,
            reservation_id: label(claim, CAPACITY_RESERVATION_ID_LABEL),
            zone,
            node: non_empty(status.and_then(|s| s.node_name.as_ref())),
            pods: load.pods.pods,
            reschedulable_pods: load.pods.reschedulable,
            requests: load.pods.requests,
            allocatable: load.allocatable,
            limited_by,
            price,
            created,
            age: age::age(created, now),
            node_class,
            provider_id: non_empty(status.and_then(|s| s.provider_id.as_ref())),
            unhealthy: unhealthy.map(Health::of),
            disrupted_taint: loads.disrupted_taint_of(claim),
            disruption_reason: disruption_reason(claim),
            drain_by: annotation(claim, DRAIN_BY_ANNOTATION).and_then(|t| t.parse().ok()),
        }
    }
}

/// Keeps only the NodeClaims of `nodepool` (all of them when `None`).
pub fn filter_nodepool(claims: Vec<NodeClaim>, nodepool: Option<&str>) -> Vec<NodeClaim> {
    match nodepool {
        None => claims,
        Some(pool) => claims
            .into_iter()
            .filter(|c| label(c, NODEPOOL_LABEL).as_deref() == Some(pool))
            .collect(),
    }
}

/// Counts and cost over a set of rows: the totals line, and `totals` in JSON and YAML.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// Number of NodeClaims.
    #[serde(rename = "nodeClaims")]
    pub total: usize,
    /// Ready ones (drifted ones not included).
    pub ready: usize,
    /// Ready but drifted ones.
    pub drifted: usize,
    /// Ones whose node matches a repair policy (drifted or not).
    pub unhealthy: usize,
    /// Being replaced because their instance is interrupted.
    pub interrupted: usize,
    /// Launching, registering or initializing ones.
    pub in_flight: usize,
    /// Waiting for their instance (`Launched` not True).
    pub launching: usize,
    /// Waiting for their Node to join (`Registered` not True).
    pub registering: usize,
    /// Waiting for their Node to be ready and untainted (`Initialized` not True).
    pub initializing: usize,
    /// Being deleted (a deletionTimestamp).
    pub terminating: usize,
    /// Sum of the known hourly prices (the fleet's cost per hour), USD, rounded to a millionth.
    #[serde(rename = "pricePerHour")]
    pub hourly_price: f64,
    /// NodeClaims whose price is not known (they add nothing to `hourly_price`).
    pub unpriced: usize,
}

impl Totals {
    /// Totals over `rows`.
    pub fn of(rows: &[Row]) -> Totals {
        let mut t = Totals {
            total: rows.len(),
            ..Totals::default()
        };
        for row in rows {
            match row.state {
                State::Launching => t.launching += 1,
                State::Registering => t.registering += 1,
                State::Initializing => t.initializing += 1,
                State::Ready => t.ready += 1,
                State::Drifted => t.drifted += 1,
                State::Unhealthy => t.unhealthy += 1,
                State::Interrupted => t.interrupted += 1,
                State::Terminating => t.terminating += 1,
            }
            match row.price {
                Some(p) => t.hourly_price += p,
                None => t.unpriced += 1,
            }
        }
        t.in_flight = t.launching + t.registering + t.initializing;
        // Sums of binary fractions carry noise (0.1 + 0.2); prices have at most 6 decimals.
        t.hourly_price = (t.hourly_price * 1e6).round() / 1e6;
        t
    }
}

impl fmt::Display for Totals {
    /// `3 nodeclaims: 1 ready, 0 drifted, 2 in flight (1 launching, 0 registering,
    /// 1 initializing), 0 terminating; $0.1234/hour`, with `, N unhealthy` after the drifted
    /// count and `, N interrupted` after the terminating count when some are, plus
    /// `(N without a known price)` when some are unpriced.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let noun = if self.total == 1 {
            "nodeclaim"
        } else {
            "nodeclaims"
        };
        let unhealthy = match self.unhealthy {
            0 => String::new(),
            n => format!(", {n} unhealthy"),
        };
        write!(
            f,
            "{} {noun}: {} ready, {} drifted{unhealthy}, {} in flight ({} launching, \
             {} registering, {} initializing), {} terminating",
            self.total,
            self.ready,
            self.drifted,
            self.in_flight,
            self.launching,
            self.registering,
            self.initializing,
            self.terminating,
        )?;
        if self.interrupted > 0 {
            write!(f, ", {} interrupted", self.interrupted)?;
        }
        write!(f, "; ${:.4}/hour", self.hourly_price)?;
        if self.unpriced > 0 {
            write!(f, " ({} without a known price)", self.unpriced)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;
    use crate::status::fixtures::build_rows;

    #[test]
    fn state_follows_conditions_in_order() {
        let all = [LAUNCHED, REGISTERED, INITIALIZED];
        let cases: &[(&[&str], bool, State)] = &[
            (&[], false, State::Launching),
            (&[REGISTERED, INITIALIZED], false, State::Launching),
            (&[LAUNCHED], false, State::Registering),
            (&[LAUNCHED, INITIALIZED], false, State::Registering),
            (&[LAUNCHED, REGISTERED], false, State::Initializing),
            (&all, false, State::Ready),
            (
                &[LAUNCHED, REGISTERED, INITIALIZED, DRIFTED],
                false,
                State::Drifted,
            ),
            // Only a ready NodeClaim shows as Drifted; Terminating still wins.
            (&[LAUNCHED, REGISTERED, DRIFTED], false, State::Initializing),
            (&[DRIFTED], false, State::Launching),
            (
                &[LAUNCHED, REGISTERED, INITIALIZED, DRIFTED],
                true,
                State::Terminating,
            ),
            (&all, true, State::Terminating),
            (&[], true, State::Terminating),
        ];
        for (true_conds, deleting, want) in cases {
            let mut claim = fixtures::claim("x", "pool", "2025-06-01T11:00:00Z");
            fixtures::set_true(&mut claim, true_conds);
            if *deleting {
                fixtures::mark_deleting(&mut claim);
            }
            assert_eq!(
                State::of(&claim),
                *want,
                "{true_conds:?} deleting={deleting}"
            );
        }
    }

    #[test]
    fn an_interruption_s_disruption_reason_makes_a_nodeclaim_interrupted() {
        let all = [LAUNCHED, REGISTERED, INITIALIZED];
        let cases: &[(&str, &[&str], bool, State)] = &[
            ("SpotInterrupted", &all, false, State::Interrupted),
            ("ScheduledChange", &all, false, State::Interrupted),
            ("InstanceStopped", &all, false, State::Interrupted),
            ("InstanceTerminated", &[LAUNCHED], false, State::Interrupted),
            (
                "SpotInterrupted",
                &[LAUNCHED, REGISTERED, INITIALIZED, DRIFTED],
                false,
                State::Interrupted,
            ),
            ("SpotInterrupted", &all, true, State::Terminating),
            // Consolidation's reasons are not interruptions; a rebalance removes nothing.
            ("Underutilized", &all, false, State::Ready),
            ("Empty", &all, false, State::Ready),
            ("RebalanceRecommendation", &all, false, State::Ready),
            ("Unhealthy", &all, false, State::Ready),
        ];
        for (reason, true_conds, deleting, want) in cases {
            let mut claim = fixtures::claim("x", "pool", "2025-06-01T11:00:00Z");
            fixtures::set_true(&mut claim, true_conds);
            fixtures::mark_disrupted(&mut claim, reason, Some("2025-06-01T12:01:40Z"));
            if *deleting {
                fixtures::mark_deleting(&mut claim);
            }
            assert_eq!(State::of(&claim), *want, "{reason} deleting={deleting}");
            let row = Row::of(
                &claim,
                fixtures::now(),
                &fixtures::FixedPrices,
                &Loads::default(),
                &Sizing::default(),
            );
            assert_eq!(row.disruption_reason.as_deref(), Some(*reason));
            assert_eq!(
                row.drain_by,
                Some("2025-06-01T12:01:40Z".parse().expect("time"))
            );
        }
        let mut bad = fixtures::claim("x", "pool", "2025-06-01T11:00:00Z");
        fixtures::mark_disrupted(&mut bad, "SpotInterrupted", Some("soon"));
        let row = Row::of(
            &bad,
            fixtures::now(),
            &fixtures::FixedPrices,
            &Loads::default(),
            &Sizing::default(),
        );
        assert_eq!(row.drain_by, None, "an unreadable time is left out");
        assert_eq!(interruption_reason(&bad), Some("SpotInterrupted"));
    }

    #[test]
    fn a_reserved_nodeclaim_names_its_reservation() {
        let mut claim = fixtures::claim("x", "pool", "2025-06-01T11:00:00Z");
        let labels = claim.metadata.labels.get_or_insert_default();
        labels.insert(CAPACITY_TYPE_LABEL.into(), "reserved".into());
        labels.insert(
            CAPACITY_RESERVATION_ID_LABEL.into(),
            "cr-0123456789abcdef0".into(),
        );
        let row = Row::of(
            &claim,
            fixtures::now(),
            &fixtures::FixedPrices,
            &Loads::default(),
            &Sizing::default(),
        );
        assert_eq!(
            row.capacity_cell().as_deref(),
            Some("reserved (cr-0123456789abcdef0)")
        );
        let json = serde_json::to_value(&row).expect("json");
        assert_eq!(json["reservationId"], "cr-0123456789abcdef0");
        let plain = fixtures::claim("y", "pool", "2025-06-01T11:00:00Z");
        let row = Row::of(
            &plain,
            fixtures::now(),
            &fixtures::FixedPrices,
            &Loads::default(),
            &Sizing::default(),
        );
        assert_eq!(row.reservation_id, None);
    }

    #[test]
    fn totals_mention_interrupted_nodeclaims_only_when_there_are_some() {
        let mut rows = build_rows(&fixtures::sample(), fixtures::now(), &fixtures::FixedPrices);
        rows[0].state = State::Interrupted;
        let totals = Totals::of(&rows);
        assert_eq!((totals.ready, totals.interrupted), (1, 1));
        assert_eq!(
            totals.to_string(),
            "6 nodeclaims: 1 ready, 0 drifted, 3 in flight (1 launching, 1 registering, \
             1 initializing), 1 terminating, 1 interrupted; $1.2345/hour (2 without a known \
             price)"
        );
    }

    #[test]
    fn false_or_unknown_conditions_do_not_count() {
        let mut claim = fixtures::claim("x", "pool", "2025-06-01T11:00:00Z");
        fixtures::set_true(&mut claim, &[LAUNCHED, REGISTERED, INITIALIZED]);
        fixtures::set_status(&mut claim, REGISTERED, "Unknown");
        assert_eq!(State::of(&claim), State::Registering);
        fixtures::set_status(&mut claim, REGISTERED, "False");
        assert_eq!(State::of(&claim), State::Registering);
    }

    #[test]
    fn rows_are_sorted_and_placeholders_are_none() {
        let claims = fixtures::sample();
        let rows = build_rows(&claims, fixtures::now(), &fixtures::FixedPrices);
        let order: Vec<_> = rows
            .iter()
            .map(|r| (r.nodepool.as_deref(), r.name.as_str()))
            .collect();
        assert_eq!(
            order,
            vec![
                (Some("default"), "default-abcde"),
                (Some("default"), "default-fghij"),
                (Some("default"), "default-klmno"),
                (Some("gpu"), "gpu-pqrst"),
                (Some("gpu"), "gpu-uvwxy"),
                (None, "stray"),
            ]
        );
        let launching = &rows[2];
        assert_eq!(launching.state, State::Launching);
        assert_eq!(launching.node, None);
        assert_eq!(launching.provider_id, None);
        let stray = &rows[5];
        assert_eq!(stray.instance_type, None);
        assert_eq!(stray.price, None);
        assert_eq!(stray.age, "<unknown>");
    }

    #[test]
    fn totals_count_states_and_prices() {
        let rows = build_rows(&fixtures::sample(), fixtures::now(), &fixtures::FixedPrices);
        let totals = Totals::of(&rows);
        assert_eq!(
            totals.to_string(),
            "6 nodeclaims: 2 ready, 0 drifted, 3 in flight (1 launching, 1 registering, \
             1 initializing), 1 terminating; $1.2345/hour (2 without a known price)"
        );
        let one = Totals::of(&rows[..1]);
        assert_eq!(
            one.to_string(),
            "1 nodeclaim: 1 ready, 0 drifted, 0 in flight (0 launching, 0 registering, \
             0 initializing), 0 terminating; $0.0960/hour"
        );
    }

    #[test]
    fn nodeclaims_are_priced_at_their_regions_table() {
        use std::collections::BTreeMap;

        use crate::price::CatalogPrices;
        let prices = CatalogPrices::embedded().expect("vendored tables");
        let launched = |name: &str, zone: &str, region: Option<&str>| {
            let mut c = fixtures::claim(name, "default", "2025-06-01T10:00:00Z");
            fixtures::set_offering(&mut c, "m5.large", "on-demand", zone);
            if let Some(region) = region {
                c.metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert(TOPOLOGY_REGION_LABEL.into(), region.into());
            }
            c
        };
        let claims = [
            launched("east", "us-east-1a", Some("us-east-1")),
            // GovCloud has its own table; the zone alone says which region it is.
            launched("gov-labelled", "us-gov-west-1a", Some("us-gov-west-1")),
            launched("gov-zone-only", "us-gov-west-1b", None),
            // No eu-west-1 table is vendored: us-east-1's list price stands in.
            launched("ireland", "eu-west-1a", Some("eu-west-1")),
        ];
        let rows = build_rows(&claims, fixtures::now(), &prices);
        let priced: BTreeMap<&str, Option<f64>> =
            rows.iter().map(|r| (r.name.as_str(), r.price)).collect();
        assert_eq!(
            priced,
            BTreeMap::from([
                ("east", Some(0.096)),
                ("gov-labelled", Some(0.121)),
                ("gov-zone-only", Some(0.121)),
                ("ireland", Some(0.096)),
            ])
        );
        assert!(Totals::of(&rows).to_string().ends_with("; $0.4340/hour"));
    }

    #[test]
    fn a_node_matching_a_repair_policy_is_unhealthy() {
        use karpenter_core::lifecycle::repair::RepairPolicy;
        let now = fixtures::now();
        let at = |minutes: i64| now - jiff::SignedDuration::from_mins(minutes);
        let ready = |minutes| Unhealthy {
            policy: RepairPolicy::new("Ready", "False", 30),
            since: Some(at(minutes)),
        };
        let (fresh, due) = (ready(5), ready(31));
        let cases = [
            (State::Ready, None, State::Ready),
            (State::Ready, Some(&fresh), State::Unhealthy),
            (State::Drifted, Some(&fresh), State::Unhealthy),
            // Booting nodes are NotReady for a while: only once the toleration ran out.
            (State::Initializing, Some(&fresh), State::Initializing),
            (State::Initializing, Some(&due), State::Unhealthy),
            (State::Terminating, Some(&due), State::Terminating),
            (State::Registering, Some(&due), State::Registering),
        ];
        for (state, unhealthy, want) in cases {
            assert_eq!(
                State::with_health(state, unhealthy, now),
                want,
                "{state} {unhealthy:?}"
            );
        }
        assert_eq!(
            Health::of(&fresh),
            Health {
                condition: "Ready=False".into(),
                since: Some(at(5)),
                toleration: "30m".into(),
                repair_after: Some(at(5) + jiff::SignedDuration::from_mins(30)),
            }
        );
        let unknown = Unhealthy {
            since: None,
            ..fresh.clone()
        };
        assert_eq!(Health::of(&unknown).repair_after, None);

        let mut rows = build_rows(&fixtures::sample(), now, &fixtures::FixedPrices);
        rows[0].state = State::Unhealthy;
        assert_eq!(
            Totals::of(&rows).to_string(),
            "6 nodeclaims: 1 ready, 0 drifted, 1 unhealthy, 3 in flight (1 launching, \
             1 registering, 1 initializing), 1 terminating; $1.2345/hour (2 without a known price)"
        );
    }

    #[test]
    fn filter_by_nodepool() {
        let kept = filter_nodepool(fixtures::sample(), Some("gpu"));
        let names: Vec<_> = kept
            .iter()
            .filter_map(|c| c.metadata.name.as_deref())
            .collect();
        // Filtering keeps the given order; rows are sorted later.
        assert_eq!(names, vec!["gpu-uvwxy", "gpu-pqrst"]);
        assert_eq!(filter_nodepool(fixtures::sample(), None).len(), 6);
        assert!(filter_nodepool(fixtures::sample(), Some("nope")).is_empty());
    }
}

//! The NodePool rows of `kubectl karpenter status`: limits against usage (`spec.limits` against
//! `status.resources`, which the controller keeps as the sum of its nodes' capacity), how many
//! of its NodeClaims are ready, in flight, drifted, unhealthy or terminating, and where its serial upgrade
//! stands (the `upgrades.karpenter.sh/paused` controls read by the same planner `kubectl
//! karpenter upgrade status` runs, and the controller's `Upgrading` condition). Pure.

use std::collections::BTreeMap;
use std::sync::Arc;

use crds::conditions;
use crds::upgrade::{Phase, UPGRADING_CONDITION};
use crds::{EC2NodeClass, NodeClaim, NodePool, StatusConditions};
use jiff::Timestamp;
use karpenter_core::scheduling::resources::{CPU, MEMORY, parse_milli, parse_units};
use karpenter_core::snapshot::nodepool_of;
use serde::Serialize;

use super::rows::State;
use crate::upgrade::report::{self, PoolStatus};

/// Printed for a resource without a limit.
pub const NO_LIMIT: &str = "-";

/// One NodePool as the NodePool section shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolRow {
    /// NodePool name.
    pub name: String,
    /// `spec.limits`, quantities as written (e.g. `cpu: "1000"`, `memory: 1000Gi`).
    pub limits: BTreeMap<String, String>,
    /// `status.resources`: the capacity of its nodes (with `nodes`, their count).
    pub usage: BTreeMap<String, String>,
    /// Its NodeClaims by state.
    pub node_claims: PoolCounts,
    /// Where its serial upgrade stands.
    pub upgrade: Upgrade,
    /// `spec.replicas` of a static NodePool (it keeps that many nodes, pods or not, and is
    /// never consolidated); absent for a dynamic one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// The capacity reservations its node class selects (`status.capacityReservations`), in
    /// instances used and held in all; absent when it selects none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservations: Option<ReservationUse>,
}

/// Instances of a node class's capacity reservations in use, of those they hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservationUse {
    /// The reservations, `cr-...`, in the node class's order.
    pub ids: Vec<String>,
    /// Instances running in them (`totalInstanceCount - availableInstanceCount`, summed; by
    /// anyone in the account, not only this NodePool).
    pub used: i64,
    /// Instances they hold in all (`totalInstanceCount`, summed).
    pub total: i64,
}

impl ReservationUse {
    /// The reservations `class` lists in its status, or `None` when it lists none. A
    /// reservation whose counts the controller did not write counts as fully available.
    pub fn of(class: &EC2NodeClass) -> Option<ReservationUse> {
        let listed = &class.status.as_ref()?.capacity_reservations;
        if listed.is_empty() {
            return None;
        }
        let mut out = ReservationUse::default();
        for r in listed {
            let total = r.total_instance_count.unwrap_or(0);
            let available = r.available_instance_count.unwrap_or(total);
            out.ids.push(r.id.clone());
            out.total += total;
            out.used += (total - available).max(0);
        }
        Some(out)
    }
}

impl PoolRow {
    /// The NODEPOOL cell: the name, with `static: N` for a static NodePool and `reserved:
    /// USED/TOTAL` when its node class selects capacity reservations, e.g.
    /// `gpu (static: 3, reserved: 2/4)`.
    pub fn label(&self) -> String {
        let mut notes = Vec::new();
        if let Some(n) = self.replicas {
            notes.push(format!("static: {n}"));
        }
        if let Some(r) = &self.reservations {
            notes.push(format!("reserved: {}/{}", r.used, r.total));
        }
        if notes.is_empty() {
            return self.name.clone();
        }
        format!("{} ({})", self.name, notes.join(", "))
    }
}

/// A NodePool's NodeClaims by state (the five counts add up to `total`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolCounts {
    /// Every NodeClaim of the NodePool.
    pub total: usize,
    /// Ready and not drifted.
    pub ready: usize,
    /// Launching, registering or initializing.
    pub in_flight: usize,
    /// Ready but drifted (waiting for, or in, an upgrade step).
    pub drifted: usize,
    /// Their node matches a repair policy (node repair replaces them once it has held long
    /// enough).
    pub unhealthy: usize,
    /// Being replaced because their instance is interrupted (not in the table's columns).
    pub interrupted: usize,
    /// Being deleted (a deletionTimestamp), whatever their conditions.
    pub terminating: usize,
}

impl PoolCounts {
    /// The counts of NodeClaims in `states`.
    pub fn of(states: impl IntoIterator<Item = State>) -> PoolCounts {
        let mut counts = PoolCounts::default();
        for state in states {
            counts.total += 1;
            match state {
                s if s.in_flight() => counts.in_flight += 1,
                State::Drifted => counts.drifted += 1,
                State::Unhealthy => counts.unhealthy += 1,
                State::Interrupted => counts.interrupted += 1,
                State::Terminating => counts.terminating += 1,
                _ => counts.ready += 1,
            }
        }
        counts
    }
}

/// Where a NodePool's serial upgrade stands.
///
/// As JSON/YAML: `summary` is the UPGRADE column ([`Upgrade::summary`], PascalCase like the
/// table: `UpToDate`, `Waiting`, `Paused`, `PausedByController`, a phase); `state` keeps the
/// snake_case values `kubectl karpenter upgrade status -o json` prints (`running`, `paused`,
/// `paused_by_controller`), so both commands' documents agree; the other fields are camelCase.
#[derive(Clone, Debug, PartialEq)]
pub struct Upgrade {
    /// `running`, `paused` (by an operator) or `paused_by_controller` (after a failed step), as
    /// `kubectl karpenter upgrade status` says.
    pub state: report::State,
    /// The phase of the step in progress, if one is.
    pub phase: Option<Phase>,
    /// Steps in progress.
    pub in_progress: usize,
    /// Drifted NodeClaims waiting for a step.
    pub waiting: usize,
    /// Why the controller paused the rollout, if it did.
    pub paused_reason: Option<String>,
    /// The reason of the NodePool's `Upgrading` condition as the controller last wrote it
    /// (`UpToDate`, `Waiting`, `Paused` or a phase), if it has one.
    pub condition_reason: Option<String>,
}

impl Serialize for Upgrade {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        /// The serialized shape: the table's value first, then the fields.
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Shape<'a> {
            summary: String,
            state: report::State,
            phase: Option<Phase>,
            in_progress: usize,
            waiting: usize,
            paused_reason: Option<&'a str>,
            condition_reason: Option<&'a str>,
        }
        Shape {
            summary: self.summary(),
            state: self.state,
            phase: self.phase,
            in_progress: self.in_progress,
            waiting: self.waiting,
            paused_reason: self.paused_reason.as_deref(),
            condition_reason: self.condition_reason.as_deref(),
        }
        .serialize(serializer)
    }
}

impl Upgrade {
    /// The UPGRADE column: the phase of the step in progress (`Draining`, with `, paused` when
    /// no further step may start), else `PausedByController`, `Paused`, `Waiting` (drifted
    /// NodeClaims wait) or `UpToDate`.
    pub fn summary(&self) -> String {
        if let Some(phase) = self.phase {
            return match self.state {
                report::State::Running => phase.as_str().to_owned(),
                _ => format!("{}, paused", phase.as_str()),
            };
        }
        match self.state {
            report::State::PausedByController => "PausedByController".to_owned(),
            report::State::Paused => "Paused".to_owned(),
            report::State::Running if self.waiting > 0 => "Waiting".to_owned(),
            report::State::Running => "UpToDate".to_owned(),
        }
    }
}

fn phase_named(reason: &str) -> Option<Phase> {
    [
        Phase::LaunchingReplacement,
        Phase::WaitingForInitialization,
        Phase::Draining,
        Phase::Terminating,
    ]
    .into_iter()
    .find(|p| p.as_str() == reason)
}

impl PoolRow {
    /// The row of `pool`, given every NodeClaim (those its `karpenter.sh/nodepool` label
    /// names are its own) at `now`.
    pub fn of(pool: &NodePool, claims: &[NodeClaim], now: Timestamp) -> PoolRow {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let mine: Vec<Arc<NodeClaim>> = claims
            .iter()
            .filter(|c| nodepool_of(c.metadata.labels.as_ref()) == Some(name.as_str()))
            .map(|c| Arc::new(c.clone()))
            .collect();
        let counts = PoolCounts::of(mine.iter().map(|c| State::of(c)));
        // Pods and PodDisruptionBudgets only decide which drifted NodeClaims are skipped;
        // queued plus skipped, the count this row shows, does not depend on them.
        let status = PoolStatus::of(pool, &mine, &[], &[], &[], now);
        let condition = conditions::get(pool.status_conditions(), UPGRADING_CONDITION);
        let reported_phase = condition
            .filter(|c| c.status == "True")
            .and_then(|c| phase_named(&c.reason));
        let upgrade = Upgrade {
            state: status.state,
            phase: status
                .plan
                .in_progress
                .first()
                .map(|s| s.phase)
                .or(reported_phase),
            in_progress: status.plan.in_progress.len(),
            waiting: status.plan.queue.len() + status.plan.skipped.len(),
            paused_reason: status.plan.paused_reason.filter(|r| !r.is_empty()),
            condition_reason: condition
                .map(|c| c.reason.clone())
                .filter(|r| !r.is_empty()),
        };
        let quantities = |map: &BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >| { map.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect() };
        PoolRow {
            name,
            limits: quantities(&pool.spec.limits),
            usage: pool
                .status
                .as_ref()
                .map(|s| quantities(&s.resources))
                .unwrap_or_default(),
            node_claims: counts,
            upgrade,
            replicas: pool.spec.replicas,
            reservations: None,
        }
    }

    /// `used/limit` of `resource` (`cpu` or `memory`) in readable units: cpu in cores
    /// (`3.5/100`), memory in binary units (`15.3Gi/1000Gi`); usage without a figure is 0, a
    /// missing limit is [`NO_LIMIT`], and a quantity that does not parse is shown as written.
    pub fn usage_of(&self, resource: &str) -> String {
        let used = self
            .usage
            .get(resource)
            .map_or_else(|| "0".to_owned(), |q| readable(resource, q));
        let limit = self
            .limits
            .get(resource)
            .map_or_else(|| NO_LIMIT.to_owned(), |q| readable(resource, q));
        format!("{used}/{limit}")
    }
}

/// The rows of `pools`, in name order.
pub fn build_pool_rows(pools: &[NodePool], claims: &[NodeClaim], now: Timestamp) -> Vec<PoolRow> {
    let mut rows: Vec<PoolRow> = pools.iter().map(|p| PoolRow::of(p, claims, now)).collect();
    rows.sort_by(|a, b| a.name.cmp(&b.name));
    rows
}

/// A quantity in readable units (see [`PoolRow::usage_of`]).
fn readable(resource: &str, quantity: &str) -> String {
    match resource {
        CPU => parse_milli(quantity).map_or_else(|_| quantity.to_owned(), cores),
        MEMORY => parse_units(quantity).map_or_else(|_| quantity.to_owned(), bytes),
        _ => quantity.to_owned(),
    }
}

/// Millicores as cores: `4`, `3.5`, `0.25`.
pub fn cores(milli: i128) -> String {
    if milli % 1000 == 0 {
        return (milli / 1000).to_string();
    }
    let text = format!("{:.3}", milli as f64 / 1000.0);
    text.trim_end_matches('0').to_owned()
}

/// Bytes in the largest binary unit that leaves at least 1: whole (`16Gi`) when exact, else with
/// one decimal (`15.3Gi`); under 1Ki as bytes.
pub fn bytes(value: i64) -> String {
    const UNITS: [(&str, i64); 5] = [
        ("Pi", 1 << 50),
        ("Ti", 1 << 40),
        ("Gi", 1 << 30),
        ("Mi", 1 << 20),
        ("Ki", 1 << 10),
    ];
    for (suffix, unit) in UNITS {
        if value.abs() >= unit {
            return if value % unit == 0 {
                format!("{}{suffix}", value / unit)
            } else {
                format!("{:.1}{suffix}", value as f64 / unit as f64)
            };
        }
    }
    value.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::fixtures;

    #[test]
    fn readable_units() {
        let cases = [
            (CPU, "4", "4"),
            (CPU, "3500m", "3.5"),
            (CPU, "250m", "0.25"),
            (CPU, "1", "1"),
            (MEMORY, "16Gi", "16Gi"),
            (MEMORY, "15668Mi", "15.3Gi"),
            (MEMORY, "512Mi", "512Mi"),
            (MEMORY, "1000", "1000"),
            (MEMORY, "1G", "953.7Mi"),
            (MEMORY, "lots", "lots"),
            ("nodes", "3", "3"),
        ];
        for (resource, quantity, want) in cases {
            assert_eq!(readable(resource, quantity), want, "{resource} {quantity}");
        }
    }

    #[test]
    fn counts_usage_and_upgrade_of_the_sample_pools() {
        let rows = build_pool_rows(&fixtures::pools(), &fixtures::claims(), fixtures::now());
        let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["default", "gpu", "idle"]);
        let default = &rows[0];
        assert_eq!(
            default.node_claims,
            PoolCounts {
                total: 4,
                ready: 1,
                in_flight: 2,
                drifted: 1,
                unhealthy: 0,
                interrupted: 0,
                terminating: 0,
            }
        );
        assert_eq!(default.usage_of(CPU), "6/1000");
        assert_eq!(default.usage_of(MEMORY), "23.5Gi/1000Gi");
        assert_eq!(default.upgrade.summary(), "Waiting");
        assert_eq!(default.upgrade.waiting, 1);
        let gpu = &rows[1];
        assert_eq!(gpu.usage_of(CPU), "4/-");
        assert_eq!(gpu.usage_of(MEMORY), "16Gi/-");
        assert_eq!(gpu.upgrade.summary(), "Paused");
        let idle = &rows[2];
        assert_eq!(idle.node_claims, PoolCounts::default());
        assert_eq!(idle.usage_of(CPU), "0/10");
        assert_eq!(idle.upgrade.summary(), "UpToDate");
    }

    #[test]
    fn upgrade_summary_prefers_the_step_in_progress() {
        let mut upgrade = Upgrade {
            state: report::State::Running,
            phase: None,
            in_progress: 0,
            waiting: 0,
            paused_reason: None,
            condition_reason: None,
        };
        assert_eq!(upgrade.summary(), "UpToDate");
        upgrade.waiting = 2;
        assert_eq!(upgrade.summary(), "Waiting");
        upgrade.state = report::State::PausedByController;
        assert_eq!(upgrade.summary(), "PausedByController");
        upgrade.phase = Some(Phase::Draining);
        assert_eq!(upgrade.summary(), "Draining, paused");
        upgrade.state = report::State::Running;
        assert_eq!(upgrade.summary(), "Draining");
    }

    #[test]
    fn the_upgrading_condition_names_the_phase_when_no_step_is_marked() {
        let mut pool = fixtures::pool("default", &[("cpu", "10")]);
        fixtures::set_condition(&mut pool, UPGRADING_CONDITION, "True", "Draining");
        let row = PoolRow::of(&pool, &[], fixtures::now());
        assert_eq!(row.upgrade.phase, Some(Phase::Draining));
        assert_eq!(row.upgrade.condition_reason.as_deref(), Some("Draining"));
        assert_eq!(row.upgrade.summary(), "Draining");
        assert_eq!(phase_named("UpToDate"), None);
    }

    #[test]
    fn a_static_nodepool_is_labelled_with_its_replicas() {
        let dynamic = testutil::nodepool("web").build();
        let row = PoolRow::of(&dynamic, &[], crate::status::fixtures::now());
        assert_eq!(row.label(), "web");
        let fixed = testutil::nodepool("fixed").replicas(3).build();
        let row = PoolRow::of(&fixed, &[], crate::status::fixtures::now());
        assert_eq!(row.replicas, Some(3));
        assert_eq!(row.label(), "fixed (static: 3)");
        let json = serde_json::to_value(&row).expect("json");
        assert_eq!(json["replicas"], 3);
    }

    #[test]
    fn reservations_show_as_used_of_total_beside_the_name() {
        let mut class = testutil::ec2nodeclass("default").build();
        let reservation = |id: &str, total, available| {
            serde_json::from_value::<crds::ec2nodeclass::CapacityReservation>(serde_json::json!({
                "id": id, "instanceType": "m5.large", "availabilityZone": "us-east-1a",
                "ownerID": "123456789012", "instanceMatchCriteria": "targeted",
                "totalInstanceCount": total, "availableInstanceCount": available,
            }))
            .expect("status entry")
        };
        assert_eq!(ReservationUse::of(&class), None);
        class.status = Some(crds::EC2NodeClassStatus {
            capacity_reservations: vec![reservation("cr-1", 3, 0), reservation("cr-2", 2, 1)],
            ..Default::default()
        });
        let used = ReservationUse::of(&class).expect("reservations");
        assert_eq!((used.used, used.total), (4, 5));
        assert_eq!(used.ids, ["cr-1", "cr-2"]);
        let pool = testutil::nodepool("gpu").replicas(2).build();
        let mut row = PoolRow::of(&pool, &[], crate::status::fixtures::now());
        row.reservations = Some(used);
        assert_eq!(row.label(), "gpu (static: 2, reserved: 4/5)");
        let json = serde_json::to_value(&row).expect("json");
        assert_eq!(json["reservations"]["used"], 4);
        assert_eq!(json["reservations"]["total"], 5);
    }
}

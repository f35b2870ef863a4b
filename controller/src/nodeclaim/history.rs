//! The disruption history's writer: appends [`crds::history::Record`]s to the ConfigMap
//! `karpenter-disruption-history` in the controller's namespace (`Settings::system_namespace`),
//! a read-modify-write guarded by the ConfigMap's resourceVersion and retried on conflict,
//! idempotent by record id, bounded by [`crds::history::append`]. The termination finalizer
//! records each removal ([`record_removal`]); the upgrade and consolidation executors record
//! their rollbacks ([`append`]).

use std::collections::BTreeMap;

use crds::NodeClaim;
use crds::history::{self, Append, Record, Removal, Replacement};
use crds::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, TOPOLOGY_ZONE_LABEL};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

use crate::runtime::Context;

/// Conflicting writes tried before giving up (the caller retries later).
const ATTEMPTS: usize = 5;

/// Append `record` to the history (no-op when a record with its id is there already).
///
/// Errors: the API failed, or every one of [`ATTEMPTS`] writes conflicted (409).
pub async fn append(ctx: &Context, record: Record) -> Result<(), kube::Error> {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.settings.system_namespace);
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let current = api.get_opt(history::CONFIGMAP_NAME).await?;
        let text = current
            .as_ref()
            .and_then(|cm| cm.data.as_ref())
            .and_then(|d| d.get(history::RECORDS_KEY))
            .map(String::as_str);
        let (text, evicted, malformed) = match history::append(text, record.clone()) {
            Append::AlreadyRecorded => return Ok(()),
            Append::Write {
                text,
                evicted,
                malformed,
            } => (text, evicted, malformed),
        };
        if malformed > 0 {
            tracing::warn!(
                configmap = history::CONFIGMAP_NAME,
                lines = malformed,
                "dropping unreadable lines of the disruption history"
            );
        }
        let written = match current {
            None => {
                let cm = ConfigMap {
                    metadata: ObjectMeta {
                        name: Some(history::CONFIGMAP_NAME.into()),
                        namespace: Some(ctx.settings.system_namespace.clone()),
                        labels: Some(BTreeMap::from([(
                            "app.kubernetes.io/managed-by".to_string(),
                            "karpenter".to_string(),
                        )])),
                        ..ObjectMeta::default()
                    },
                    data: Some(BTreeMap::from([(history::RECORDS_KEY.to_string(), text)])),
                    ..ConfigMap::default()
                };
                api.create(&PostParams::default(), &cm).await
            }
            Some(mut cm) => {
                // `replace` sends the resourceVersion read: a concurrent writer makes it 409.
                cm.data
                    .get_or_insert_with(Default::default)
                    .insert(history::RECORDS_KEY.to_string(), text);
                api.replace(history::CONFIGMAP_NAME, &PostParams::default(), &cm)
                    .await
            }
        };
        match written {
            Ok(_) => {
                tracing::info!(nodeclaim = %record.nodeclaim, reason = %record.reason,
                    outcome = ?record.outcome, evicted, "disruption recorded");
                return Ok(());
            }
            Err(kube::Error::Api(e)) if e.code == 409 => last = Some(kube::Error::Api(e)),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        kube::Error::Service("disruption history: every write conflicted".into())
    }))
}

/// The price of `claim`'s offering, USD/hour: its instance type, zone and capacity type
/// (labels) looked up in the offerings the cloud provider lists for its node class, else in
/// the embedded EC2 catalog (on-demand list price; spot derived per zone as the simulated cloud
/// does). `None` before launch or when neither knows it.
pub async fn price(ctx: &Context, claim: &NodeClaim) -> Option<f64> {
    let labels = claim.metadata.labels.as_ref()?;
    let instance_type = labels.get(INSTANCE_TYPE_LABEL)?;
    let zone = labels.get(TOPOLOGY_ZONE_LABEL)?;
    let capacity_type = labels.get(CAPACITY_TYPE_LABEL)?;
    let class = ctx
        .state
        .nodeclasses
        .state()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(claim.spec.node_class_ref.name.as_str()));
    if let Some(class) = class
        && let Ok(types) = ctx.cloud.instance_types(&class).await
    {
        let offered = types
            .iter()
            .filter(|t| &t.name == instance_type)
            .flat_map(|t| t.offerings.iter())
            .find(|o| &o.zone == zone && &o.capacity_type == capacity_type)
            .map(|o| o.price);
        if offered.is_some() {
            return offered;
        }
    }
    use karpenter_core::capacity::catalog::{Catalog, spot_price};
    let on_demand = Catalog::embedded()
        .ok()?
        .get(instance_type)?
        .on_demand_price;
    match capacity_type.as_str() {
        crds::labels::CAPACITY_TYPE_SPOT => Some(spot_price(on_demand, instance_type, zone)),
        _ => Some(on_demand),
    }
}

/// Record the removal of `claim`, whose termination finalizer is about to be released: its
/// reason (the `DisruptionReason` condition, else `Deleted`), decision time, pods moved, price
/// and replacement (found in the cache by the NodeClaim's replacement annotation) and the cost
/// change. A replacement deleted by a rollback is not recorded again: its rollback's record
/// names it.
///
/// Errors: as [`append`].
pub async fn record_removal(ctx: &Context, claim: &NodeClaim) -> Result<(), kube::Error> {
    if history::disruption_reason(claim) == history::reason::ROLLED_BACK {
        return Ok(());
    }
    let replacement = match history::replacement_name(claim) {
        None => None,
        Some(name) => {
            let found = ctx
                .state
                .nodeclaims
                .state()
                .into_iter()
                .find(|c| c.metadata.name.as_deref() == Some(name.as_str()));
            let (instance_type, price) = match found {
                Some(r) => (
                    r.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(INSTANCE_TYPE_LABEL))
                        .cloned(),
                    price(ctx, &r).await,
                ),
                None => (None, None),
            };
            Some(Replacement {
                nodeclaim: name,
                instance_type,
                price,
                replaces: history::replaced_together(claim),
            })
        }
    };
    let record = Record::removal(
        claim,
        Removal {
            finished: Some(ctx.clock.now()),
            price: price(ctx, claim).await,
            replacement,
        },
    );
    append(ctx, record).await
}

/// The rollback record of `kept` (it keeps running) for `reason`, whose replacement
/// `replacement` was deleted because of `why`; the replacement's instance type is taken from
/// it when given.
pub fn rollback_record(
    ctx: &Context,
    kept: &NodeClaim,
    reason: &str,
    replacement_name: &str,
    replacement: Option<&NodeClaim>,
    why: &str,
) -> Record {
    Record::rollback(
        kept,
        reason,
        Replacement {
            nodeclaim: replacement_name.to_string(),
            instance_type: replacement
                .and_then(|r| r.metadata.labels.as_ref())
                .and_then(|l| l.get(INSTANCE_TYPE_LABEL))
                .cloned(),
            price: None,
            replaces: 1,
        },
        why,
        ctx.clock.now(),
    )
}

/// Whether a failed history write should hold the NodeClaim's finalizer for another try: a
/// conflict, a server error, throttling or no response. A refusal that retrying cannot fix
/// (403 forbidden, 404 no such namespace, 422 invalid) is logged instead, so a missing RBAC rule
/// never blocks terminations.
pub fn retryable(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 409 || s.code == 429 || s.code >= 500,
        _ => true,
    }
}

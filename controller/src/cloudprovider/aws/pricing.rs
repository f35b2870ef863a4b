//! The AWS provider's on-demand prices (upstream `aws:pkg/providers/pricing` and its
//! `providers.pricing` controller): the cluster region's vendored table at start
//! ([`PriceTable::vendored`]; us-east-1's, marked approximate, where none is vendored), replaced
//! by the Pricing API's answer ([`ec2api::pricing::Pricing`]) by [`run`] every
//! [`REFRESH_INTERVAL`]. A failed refresh keeps the prices in force, logs a warning and is
//! counted ([`OnDemandPrices::failures`]); it is tried again after [`RETRY_INTERVAL`]. GovCloud
//! regions are never refreshed: the Pricing API does not serve them (upstream skips them too),
//! and their vendored tables stand.
//!
//! Instance types priced before a refresh are priced again after it: the provider compares
//! [`OnDemandPrices::generation`] with the one its cached instance types were priced at.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ec2api::pricing::{Pricing, PricingError};
use karpenter_core::capacity::catalog::CatalogError;
use karpenter_core::capacity::prices::PriceTable;

/// How often the Pricing API is asked again after an answer (upstream's controller: 12h).
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(12 * 3600);
/// How soon a failed refresh is tried again (upstream requeues with controller-runtime's
/// backoff; here a fixed wait, short against [`REFRESH_INTERVAL`]).
pub const RETRY_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// What one [`OnDemandPrices::refresh`] did.
#[derive(Clone, Debug, PartialEq)]
pub enum Refresh {
    /// The answer replaced the prices; it priced this many instance types.
    Updated(usize),
    /// The region is not served by the Pricing API (GovCloud); the vendored table stands.
    Skipped,
    /// The call failed or answered nothing; the prices in force stay.
    Failed(PricingError),
}

/// The on-demand prices (USD/hour) the AWS provider uses for one region.
#[derive(Debug)]
pub struct OnDemandPrices {
    table: RwLock<Arc<PriceTable>>,
    generation: AtomicU64,
    failures: AtomicU64,
}

impl OnDemandPrices {
    /// The vendored prices of `region` (e.g. `eu-west-1`), until a refresh replaces them.
    ///
    /// Errors: the embedded price data is malformed (a build defect).
    pub fn new(region: &str) -> Result<OnDemandPrices, Arc<CatalogError>> {
        Ok(OnDemandPrices {
            table: RwLock::new(PriceTable::vendored(region)?),
            generation: AtomicU64::new(0),
            failures: AtomicU64::new(0),
        })
    }

    /// The prices in force.
    pub fn table(&self) -> Arc<PriceTable> {
        Arc::clone(&self.table.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The on-demand price of `instance_type`, USD/hour; `None` when no price is known.
    pub fn get(&self, instance_type: &str) -> Option<f64> {
        self.table
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(instance_type)
    }

    /// Bumped each time a refresh replaces the prices (0 while the vendored table stands).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// How many refreshes have failed since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Ask `api` for the region's prices once and lay the answer over the prices in force
    /// ([`PriceTable::with_answer`]): logged at info when it replaced them, at warn (and
    /// counted) when it failed.
    pub async fn refresh(&self, api: &dyn Pricing) -> Refresh {
        let current = self.table();
        let region = current.region().to_string();
        if region.starts_with("us-gov") {
            return Refresh::Skipped;
        }
        match api.on_demand_prices(&region).await {
            Ok(answer) => {
                let next = Arc::new(current.with_answer(&answer));
                *self.table.write().unwrap_or_else(|e| e.into_inner()) = next;
                self.generation.fetch_add(1, Ordering::AcqRel);
                tracing::info!(
                    region = %region,
                    instance_type_count = answer.len(),
                    "updated on-demand pricing"
                );
                Refresh::Updated(answer.len())
            }
            Err(e) => {
                let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
                tracing::warn!(
                    region = %region,
                    error = %e,
                    failures,
                    approximate = current.approximate(),
                    "refreshing on-demand pricing failed; keeping the prices in force"
                );
                Refresh::Failed(e)
            }
        }
    }
}

/// Refresh `prices` from `api` now, then every [`REFRESH_INTERVAL`] after an answer, or
/// [`RETRY_INTERVAL`] after a failure; returns at once, asking nothing, in an isolated VPC
/// (`ISOLATED_VPC`: the API is not reachable, upstream skips it too) or for a region the API
/// does not serve. Runs until its task is dropped.
pub async fn run(prices: Arc<OnDemandPrices>, api: Arc<dyn Pricing>, isolated_vpc: bool) {
    if isolated_vpc {
        tracing::info!(
            region = %prices.table().region(),
            "running in an isolated VPC: on-demand prices stay the vendored table's, the Pricing API is not called"
        );
        return;
    }
    loop {
        let wait = match prices.refresh(api.as_ref()).await {
            Refresh::Updated(_) => REFRESH_INTERVAL,
            Refresh::Failed(_) => RETRY_INTERVAL,
            Refresh::Skipped => {
                tracing::info!(
                    region = %prices.table().region(),
                    "the Pricing API does not serve GovCloud regions; on-demand prices stay the vendored table's"
                );
                return;
            }
        };
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;

    /// Answers each call with the next scripted result and records the regions asked for.
    #[derive(Default)]
    struct Scripted {
        answers: Mutex<Vec<Result<HashMap<String, f64>, PricingError>>>,
        asked: Mutex<Vec<String>>,
    }

    #[async_trait]
    impl Pricing for Scripted {
        async fn on_demand_prices(
            &self,
            region: &str,
        ) -> Result<HashMap<String, f64>, PricingError> {
            self.asked.lock().expect("asked").push(region.to_string());
            self.answers.lock().expect("answers").remove(0)
        }
    }

    fn throttled() -> PricingError {
        PricingError {
            code: "ThrottlingException".into(),
            message: "Rate exceeded".into(),
        }
    }

    #[tokio::test]
    async fn an_answer_replaces_the_table_and_a_failure_keeps_it() {
        let prices = OnDemandPrices::new("eu-west-1").expect("table");
        assert_eq!(
            prices.get("m5.large"),
            Some(0.096),
            "us-east-1's, approximate"
        );
        assert!(prices.table().approximate());
        let api = Scripted {
            answers: Mutex::new(vec![
                Err(throttled()),
                Ok([("m5.large".to_string(), 0.107)].into()),
                Err(throttled()),
            ]),
            ..Scripted::default()
        };

        assert_eq!(prices.refresh(&api).await, Refresh::Failed(throttled()));
        assert_eq!(prices.get("m5.large"), Some(0.096));
        assert_eq!((prices.failures(), prices.generation()), (1, 0));

        assert_eq!(prices.refresh(&api).await, Refresh::Updated(1));
        assert_eq!(prices.get("m5.large"), Some(0.107));
        assert!(!prices.table().approximate());
        assert_eq!(prices.generation(), 1);

        assert_eq!(prices.refresh(&api).await, Refresh::Failed(throttled()));
        assert_eq!(prices.get("m5.large"), Some(0.107), "the last answer stays");
        assert_eq!((prices.failures(), prices.generation()), (2, 1));
        assert_eq!(
            *api.asked.lock().expect("asked"),
            ["eu-west-1", "eu-west-1", "eu-west-1"]
        );
    }

    #[tokio::test]
    async fn the_provider_prices_offerings_and_instances_at_the_refreshed_prices() {
        use std::collections::BTreeSet;

        use karpenter_core::capacity::node_class::CapacityConfig;
        use karpenter_core::clock::SystemClock;

        use super::super::launchtemplate::ClusterInfo;
        use super::super::nodeclass_tests::account;
        use super::super::{AwsCloud, AwsSettings};

        let settings = AwsSettings {
            cluster_name: "demo".into(),
            cluster: ClusterInfo::default(),
            region: "eu-west-1".into(),
            kubernetes_version: "1.32".into(),
        };
        let cloud =
            AwsCloud::new(Arc::new(account()), settings, Arc::new(SystemClock)).expect("cloud");
        let zones: BTreeSet<String> = ["eu-west-1a".to_string()].into();
        let on_demand = |types: &[Arc<karpenter_core::capacity::InstanceType>]| {
            let m5 = types
                .iter()
                .find(|t| t.name == "m5.large")
                .expect("m5.large");
            let region = m5.labels.get(crds::labels::TOPOLOGY_REGION_LABEL).cloned();
            let price = m5
                .offerings
                .iter()
                .find(|o| o.capacity_type == "on-demand")
                .map(|o| o.price);
            (region, price)
        };
        let before = cloud
            .types_in(&zones, &CapacityConfig::default())
            .await
            .expect("types");
        assert_eq!(
            on_demand(&before),
            (Some("eu-west-1".into()), Some(0.096)),
            "us-east-1's table stands in"
        );
        assert_eq!(cloud.price_of("m5.large", "eu-west-1a", false), 0.096);

        let api = Scripted {
            answers: Mutex::new(vec![Ok([("m5.large".to_string(), 0.107)].into())]),
            ..Scripted::default()
        };
        let refreshed = cloud.on_demand_prices().refresh(&api).await;
        assert_eq!(refreshed, Refresh::Updated(1));
        let after = cloud
            .types_in(&zones, &CapacityConfig::default())
            .await
            .expect("types");
        assert_eq!(on_demand(&after), (Some("eu-west-1".into()), Some(0.107)));
        assert_eq!(cloud.price_of("m5.large", "eu-west-1a", false), 0.107);
    }

    #[tokio::test]
    async fn an_isolated_vpc_keeps_the_vendored_table_without_asking() {
        let prices = Arc::new(OnDemandPrices::new("eu-west-1").expect("table"));
        let api = Arc::new(Scripted {
            answers: Mutex::new(vec![Ok([("m5.large".to_string(), 0.107)].into())]),
            ..Scripted::default()
        });
        run(
            Arc::clone(&prices),
            Arc::clone(&api) as Arc<dyn Pricing>,
            true,
        )
        .await;
        assert!(api.asked.lock().expect("asked").is_empty());
        assert_eq!(prices.get("m5.large"), Some(0.096));
        assert_eq!(prices.generation(), 0);
    }

    #[tokio::test]
    async fn govcloud_keeps_its_vendored_table_without_asking() {
        let prices = Arc::new(OnDemandPrices::new("us-gov-west-1").expect("table"));
        let api = Arc::new(Scripted::default());
        run(
            Arc::clone(&prices),
            Arc::clone(&api) as Arc<dyn Pricing>,
            false,
        )
        .await;
        assert!(api.asked.lock().expect("asked").is_empty());
        assert_eq!(prices.get("m5.large"), Some(0.121));
        assert!(!prices.table().approximate());
    }
}

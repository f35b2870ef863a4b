//! Vendored on-demand price tables: the list price (USD/hour, Linux, shared tenancy) of each
//! instance type per region, as upstream generates them for its fallback
//! (`aws:pkg/providers/pricing/zz_generated.pricing_aws.go` for us-east-1,
//! `zz_generated.pricing_aws_us_gov.go` for us-gov-east-1 and us-gov-west-1; see
//! `data/ec2/README.md`). A region with no table of its own is priced from us-east-1's and
//! marked approximate, as upstream does until its Pricing API refresh answers. The simulated
//! cloud's catalog prices its offerings from these; the AWS provider starts from them and
//! replaces them with the Pricing API's answer.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use serde::Deserialize;

use crate::capacity::embedded::{CatalogError, REGION};

const PRICES_CSV: &str = include_str!("../../data/ec2/ec2-on-demand-prices.csv");

#[derive(Deserialize)]
struct PriceRow {
    region: String,
    instance_type: String,
    usd_per_hour: f64,
}

/// Where a [`PriceTable`]'s figures come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PriceSource {
    /// The region's own vendored table.
    Table,
    /// us-east-1's vendored table, standing in for a region with none (estimates).
    UsEast1Table,
    /// The Pricing API's answer for the region, over the vendored figures it did not price.
    PricingApi,
}

/// The on-demand prices of one region, from its vendored table or, where there is none,
/// us-east-1's; the AWS provider replaces them with the Pricing API's
/// ([`PriceTable::with_answer`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PriceTable {
    region: String,
    prices: HashMap<String, f64>,
    source: PriceSource,
}

fn all_rows() -> Result<&'static [PriceRow], Arc<CatalogError>> {
    static ROWS: OnceLock<Result<Vec<PriceRow>, Arc<CatalogError>>> = OnceLock::new();
    ROWS.get_or_init(|| {
        csv::Reader::from_reader(PRICES_CSV.as_bytes())
            .deserialize()
            .collect::<Result<Vec<PriceRow>, _>>()
            .map_err(|e| {
                Arc::new(CatalogError {
                    file: "ec2-on-demand-prices.csv",
                    message: e.to_string(),
                })
            })
    })
    .as_ref()
    .map(Vec::as_slice)
    .map_err(Arc::clone)
}

impl PriceTable {
    /// The table of `region` (e.g. `eu-west-1`), parsed once per process and region: its own
    /// vendored prices, or us-east-1's marked approximate ([`PriceTable::approximate`]) when
    /// none are vendored for it. Every region has a table.
    ///
    /// Errors: the embedded CSV is malformed (a build defect).
    pub fn vendored(region: &str) -> Result<Arc<PriceTable>, Arc<CatalogError>> {
        type Cache = Mutex<HashMap<String, Arc<PriceTable>>>;
        static TABLES: OnceLock<Cache> = OnceLock::new();
        let rows = all_rows()?;
        let mut cache = TABLES
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let table = cache.entry(region.to_string()).or_insert_with(|| {
            let of = |want: &str| -> HashMap<String, f64> {
                rows.iter()
                    .filter(|r| r.region == want)
                    .map(|r| (r.instance_type.clone(), r.usd_per_hour))
                    .collect()
            };
            let own = of(region);
            let (prices, source) = if own.is_empty() {
                (of(REGION), PriceSource::UsEast1Table)
            } else {
                (own, PriceSource::Table)
            };
            Arc::new(PriceTable {
                region: region.to_string(),
                prices,
                source,
            })
        });
        Ok(Arc::clone(table))
    }

    /// The regions with a vendored table of their own, sorted (us-east-1 and the two GovCloud
    /// regions today).
    pub fn regions() -> Result<Vec<String>, Arc<CatalogError>> {
        let regions: BTreeSet<&str> = all_rows()?.iter().map(|r| r.region.as_str()).collect();
        Ok(regions.into_iter().map(str::to_string).collect())
    }

    /// The region whose instances these prices are for, e.g. `eu-west-1` (also when the
    /// figures are us-east-1's).
    pub fn region(&self) -> &str {
        &self.region
    }

    /// Whether the figures are us-east-1's standing in for a region with no table.
    pub fn approximate(&self) -> bool {
        self.source == PriceSource::UsEast1Table
    }

    /// Where the figures come from.
    pub fn source(&self) -> PriceSource {
        self.source
    }

    /// This table with the Pricing API's `answer` (instance type to USD/hour) laid over it: the
    /// answer's prices replace the table's, and types the answer does not price keep theirs
    /// (upstream keeps what it knew before). The result is [`PriceSource::PricingApi`], no
    /// longer approximate. An empty answer changes nothing (callers treat it as a failure).
    pub fn with_answer(&self, answer: &HashMap<String, f64>) -> PriceTable {
        if answer.is_empty() {
            return self.clone();
        }
        let mut prices = self.prices.clone();
        prices.extend(answer.iter().map(|(t, p)| (t.clone(), *p)));
        PriceTable {
            region: self.region.clone(),
            prices,
            source: PriceSource::PricingApi,
        }
    }

    /// The on-demand price of `instance_type`, USD/hour; `None` when the table does not list it.
    pub fn get(&self, instance_type: &str) -> Option<f64> {
        self.prices.get(instance_type).copied()
    }

    /// Every (instance type, USD/hour) in the table.
    pub fn prices(&self) -> &HashMap<String, f64> {
        &self.prices
    }

    /// How many instance types it prices.
    pub fn len(&self) -> usize {
        self.prices.len()
    }

    /// Whether it prices no instance type.
    pub fn is_empty(&self) -> bool {
        self.prices.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn govcloud_has_its_own_prices_and_other_regions_borrow_us_east_1s() {
        assert_eq!(
            PriceTable::regions().expect("regions"),
            ["us-east-1", "us-gov-east-1", "us-gov-west-1"]
        );
        let east = PriceTable::vendored("us-east-1").expect("us-east-1");
        assert!(!east.approximate());
        assert_eq!(east.get("m5.large"), Some(0.096));
        let gov = PriceTable::vendored("us-gov-west-1").expect("us-gov-west-1");
        assert!(!gov.approximate());
        assert_eq!(gov.region(), "us-gov-west-1");
        // GovCloud list prices are above us-east-1's (upstream's table: 0.121 against 0.096).
        assert_eq!(gov.get("m5.large"), Some(0.121));
        let ireland = PriceTable::vendored("eu-west-1").expect("eu-west-1");
        assert!(ireland.approximate());
        assert_eq!(ireland.region(), "eu-west-1");
        assert_eq!(ireland.get("m5.large"), Some(0.096));
        assert_eq!(ireland.len(), east.len());
        assert_eq!(ireland.get("no-such.type"), None);
    }

    #[test]
    fn an_answer_replaces_the_prices_it_names_and_keeps_the_rest() {
        let ireland = PriceTable::vendored("eu-west-1").expect("eu-west-1");
        let answer: HashMap<String, f64> = [("m5.large".to_string(), 0.107)].into();
        let live = ireland.with_answer(&answer);
        assert_eq!(live.source(), PriceSource::PricingApi);
        assert!(!live.approximate());
        assert_eq!(live.get("m5.large"), Some(0.107));
        assert_eq!(live.get("m5.xlarge"), ireland.get("m5.xlarge"));
        assert_eq!(ireland.with_answer(&HashMap::new()), *ireland);
    }
}

//! Offering prices for the PRICE/HOUR column and the totals line, from the vendored on-demand
//! price tables of the instance's region (karpenter-core's [`PriceTable`]: us-east-1 and the
//! GovCloud regions have their own; any other region is priced at us-east-1's list prices, an
//! estimate), and the simulated cloud's derived spot prices. The controller records no price on
//! a NodeClaim, so the plugin prices the region the NodeClaim's labels name.

use std::sync::Arc;

use crds::labels::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT};
use karpenter_core::capacity::catalog::{CatalogError, REGION, spot_price};
use karpenter_core::capacity::prices::PriceTable;

use crate::status::PriceBook;

/// Prices looked up in the vendored table of each instance's region.
#[derive(Clone, Debug)]
pub struct CatalogPrices {
    /// The region of an instance whose region and zone are not known.
    default_region: String,
    /// Regions with a vendored table or zone offerings, longest first (zone to region).
    known_regions: Vec<String>,
}

impl CatalogPrices {
    /// The vendored tables, with us-east-1 for instances of no known region or zone.
    ///
    /// Errors: the embedded price data cannot be parsed (a build defect).
    pub fn embedded() -> Result<CatalogPrices, Arc<CatalogError>> {
        let mut known_regions = PriceTable::regions()?;
        known_regions.extend(karpenter_core::capacity::catalog::Catalog::regions());
        known_regions.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        known_regions.dedup();
        // Fail now, not at the first row, if the table does not parse.
        PriceTable::vendored(REGION)?;
        Ok(CatalogPrices {
            default_region: REGION.to_string(),
            known_regions,
        })
    }

    /// The region whose prices apply: `region` as given, else the one `zone` is in, else the
    /// default (us-east-1).
    pub fn region_of(&self, region: Option<&str>, zone: Option<&str>) -> String {
        if let Some(region) = region.filter(|r| !r.is_empty()) {
            return region.to_string();
        }
        zone.and_then(|z| region_of_zone(z, &self.known_regions))
            .unwrap_or_else(|| self.default_region.clone())
    }
}

/// The region of an availability zone (`eu-west-1a` is in `eu-west-1`, the Local Zone
/// `us-west-2-lax-1a` in `us-west-2`), by [`region_of_zone`] over the regions with vendored
/// prices or zone offerings. `None` for a zone that names no region.
pub fn region_of(zone: &str) -> Option<String> {
    let mut known = PriceTable::regions().unwrap_or_default();
    known.extend(karpenter_core::capacity::catalog::Catalog::regions());
    known.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
    region_of_zone(zone, &known)
}

/// The region of an availability zone: the longest of `known` that the zone extends (a Local
/// Zone such as `us-west-2-lax-1a` is in `us-west-2`), else the zone less its final letter
/// (`eu-west-1a` is in `eu-west-1`). `None` for a zone that is neither.
fn region_of_zone(zone: &str, known: &[String]) -> Option<String> {
    if let Some(region) = known
        .iter()
        .find(|r| zone.len() > r.len() && zone.starts_with(r.as_str()))
    {
        return Some(region.clone());
    }
    let region = zone.strip_suffix(|c: char| c.is_ascii_lowercase())?;
    region
        .ends_with(|c: char| c.is_ascii_digit())
        .then(|| region.to_string())
}

impl PriceBook for CatalogPrices {
    /// On-demand and reserved capacity are priced at the on-demand rate of the instance's
    /// region (a capacity reservation is billed at it); spot needs the zone, since spot prices
    /// vary by zone. Unknown instance or capacity types have no price.
    fn hourly_price(
        &self,
        instance_type: &str,
        region: Option<&str>,
        zone: Option<&str>,
        capacity_type: Option<&str>,
    ) -> Option<f64> {
        let table = PriceTable::vendored(&self.region_of(region, zone)).ok()?;
        let on_demand = table.get(instance_type)?;
        match capacity_type? {
            CAPACITY_TYPE_ON_DEMAND | CAPACITY_TYPE_RESERVED => Some(on_demand),
            CAPACITY_TYPE_SPOT => Some(spot_price(on_demand, instance_type, zone?)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_from_the_embedded_catalog() {
        let prices = CatalogPrices::embedded().expect("embedded catalog");
        let od = prices
            .hourly_price("m5.large", None, Some("us-east-1a"), Some("on-demand"))
            .expect("m5.large is sold on demand");
        assert!(
            (od - 0.096).abs() < 1e-9,
            "m5.large on-demand is $0.096, got {od}"
        );
        let spot = prices
            .hourly_price("m5.large", None, Some("us-east-1a"), Some("spot"))
            .expect("spot price with a zone");
        assert!(spot > 0.0 && spot < od, "spot {spot} below on-demand {od}");
        assert_eq!(spot, spot_price(od, "m5.large", "us-east-1a"));
        assert_eq!(
            prices.hourly_price("m5.large", None, Some("us-east-1a"), Some("reserved")),
            Some(od)
        );
        assert_eq!(
            prices.hourly_price("m5.large", None, None, Some("spot")),
            None
        );
        assert_eq!(
            prices.hourly_price("m5.large", None, Some("us-east-1a"), None),
            None
        );
        assert_eq!(
            prices.hourly_price("m5.large", None, Some("us-east-1a"), Some("barter")),
            None
        );
        assert_eq!(
            prices.hourly_price("m99.huge", None, Some("us-east-1a"), Some("on-demand")),
            None
        );
    }

    #[test]
    fn prices_follow_the_instances_region_from_its_label_or_its_zone() {
        let prices = CatalogPrices::embedded().expect("embedded catalog");
        let gov = Some("on-demand");
        // us-gov-west-1 has its own table: m5.large lists at $0.121 there, $0.096 in us-east-1.
        assert_eq!(
            prices.hourly_price("m5.large", Some("us-gov-west-1"), None, gov),
            Some(0.121)
        );
        assert_eq!(
            prices.hourly_price("m5.large", None, Some("us-gov-west-1b"), gov),
            Some(0.121)
        );
        assert_eq!(
            prices.hourly_price("m5.large", None, None, gov),
            Some(0.096),
            "no region or zone: us-east-1"
        );
        assert_eq!(
            prices.region_of(None, Some("us-west-2-lax-1a")),
            "us-west-2"
        );
        assert_eq!(prices.region_of(None, Some("eu-west-1c")), "eu-west-1");
        assert_eq!(prices.region_of(None, Some("ap-east-2a")), "ap-east-2");
        assert_eq!(prices.region_of(Some(""), Some("nowhere")), "us-east-1");
    }
}

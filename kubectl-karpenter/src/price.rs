//! Offering prices for the PRICE/HOUR column and the totals line, from the controller's embedded
//! us-east-1 EC2 catalog: on-demand list prices, and the simulated cloud's derived spot prices.

use std::sync::Arc;

use crds::labels::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT};
use karpenter_core::capacity::catalog::{Catalog, CatalogError, spot_price};

use crate::status::PriceBook;

/// Prices looked up in the embedded EC2 catalog.
#[derive(Clone, Debug)]
pub struct CatalogPrices {
    catalog: Arc<Catalog>,
}

impl CatalogPrices {
    /// The embedded catalog.
    ///
    /// Errors: the embedded price data cannot be parsed (a build defect).
    pub fn embedded() -> Result<CatalogPrices, Arc<CatalogError>> {
        Ok(CatalogPrices {
            catalog: Catalog::embedded()?,
        })
    }
}

impl PriceBook for CatalogPrices {
    /// On-demand and reserved capacity are priced at the on-demand rate (a capacity reservation
    /// is billed at it); spot needs the zone, since spot prices vary by zone. Unknown instance
    /// or capacity types have no price.
    fn hourly_price(
        &self,
        instance_type: &str,
        zone: Option<&str>,
        capacity_type: Option<&str>,
    ) -> Option<f64> {
        let on_demand = self.catalog.get(instance_type)?.on_demand_price;
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
            .hourly_price("m5.large", Some("us-east-1a"), Some("on-demand"))
            .expect("m5.large is sold on demand");
        assert!(
            (od - 0.096).abs() < 1e-9,
            "m5.large on-demand is $0.096, got {od}"
        );
        let spot = prices
            .hourly_price("m5.large", Some("us-east-1a"), Some("spot"))
            .expect("spot price with a zone");
        assert!(spot > 0.0 && spot < od, "spot {spot} below on-demand {od}");
        assert_eq!(spot, spot_price(od, "m5.large", "us-east-1a"));
        assert_eq!(
            prices.hourly_price("m5.large", Some("us-east-1a"), Some("reserved")),
            Some(od)
        );
        assert_eq!(prices.hourly_price("m5.large", None, Some("spot")), None);
        assert_eq!(
            prices.hourly_price("m5.large", Some("us-east-1a"), None),
            None
        );
        assert_eq!(
            prices.hourly_price("m5.large", Some("us-east-1a"), Some("barter")),
            None
        );
        assert_eq!(
            prices.hourly_price("m99.huge", Some("us-east-1a"), Some("on-demand")),
            None
        );
    }
}

//! The Price List Query API call of the AWS provider's on-demand pricing (upstream
//! `aws:pkg/providers/pricing/pricing.go`): GetProducts for the EC2 on-demand Linux prices of
//! one region, every page read, each PriceList document reduced to its instance type and hourly
//! price. The call sits behind the narrow [`Pricing`] trait so the provider's refresh can be
//! driven by a fake; [`SdkPricing`] is the aws-sdk-pricing implementation. The controller needs
//! `pricing:GetProducts` and nothing else.
//!
//! The Pricing API answers in a few regions only: [`endpoint_region`] picks the one upstream
//! uses for the cluster's region.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_pricing::types::{Filter as PriceFilter, FilterType};

use crate::sdk_error_parts;

/// Most products one GetProducts page asks for (the API's maximum; upstream's setting).
pub const PAGE_SIZE: i32 = 100;

/// The filters every query sends (upstream's): field, value, matched exactly (`TERM_MATCH`).
/// `regionCode` is added per query.
pub const COMMON_FILTERS: [(&str, &str); 5] = [
    ("serviceCode", "AmazonEC2"),
    ("preInstalledSw", "NA"),
    ("operatingSystem", "Linux"),
    ("capacitystatus", "Used"),
    ("marketoption", "OnDemand"),
];

/// The two queries of one refresh, each added to [`COMMON_FILTERS`] (upstream's): virtualised
/// instances on shared tenancy, and bare-metal instances, which the price list files under
/// dedicated tenancy.
pub const QUERIES: [[(&str, &str); 2]; 2] = [
    [("tenancy", "Shared"), ("productFamily", "Compute Instance")],
    [
        ("tenancy", "Dedicated"),
        ("productFamily", "Compute Instance (bare metal)"),
    ],
];

/// A Price List Query API error: AWS's error code (`Transport` when no answer came, `Parse`
/// when the answer was not the documented shape) and message.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("GetProducts: {code}: {message}")]
pub struct PricingError {
    /// AWS error code, e.g. `AccessDeniedException`, `ThrottlingException`, `Transport`.
    pub code: String,
    /// AWS's message.
    pub message: String,
}

/// The on-demand price lookups the AWS provider makes.
#[async_trait]
pub trait Pricing: Send + Sync {
    /// The on-demand Linux prices of `region` (e.g. `eu-west-1`), per instance type, per hour:
    /// USD, except in the China regions, whose price list is in CNY (as upstream reads it).
    /// Both [`QUERIES`] are made and merged.
    ///
    /// Errors: either query failed on any page, or either answered no price at all (upstream
    /// treats an empty answer as a failure, so a table is never replaced by nothing).
    async fn on_demand_prices(&self, region: &str) -> Result<HashMap<String, f64>, PricingError>;
}

/// The region whose Pricing API endpoint serves a cluster in `region` (upstream `NewAPI`):
/// `ap-south-1` for `ap-*`, `cn-northwest-1` for `cn-*`, `eu-central-1` for `eu-*`, else
/// `us-east-1`.
pub fn endpoint_region(region: &str) -> &'static str {
    if region.starts_with("ap-") {
        "ap-south-1"
    } else if region.starts_with("cn-") {
        "cn-northwest-1"
    } else if region.starts_with("eu-") {
        "eu-central-1"
    } else {
        "us-east-1"
    }
}

/// The currency `region`'s price list is in: `CNY` in the China regions, else `USD`.
pub fn currency(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "CNY"
    } else {
        "USD"
    }
}

/// The instance type and hourly price in one PriceList document (a product with its terms, as
/// GetProducts returns each as a JSON string): `product.attributes.instanceType` and the
/// first non-zero `pricePerUnit` in `currency` of its on-demand terms' price dimensions (a
/// Linux on-demand product has one term with one dimension). `None` for a document
/// that does not parse, names no instance type or has no non-zero price in that currency
/// (upstream skips such documents too).
pub fn parse_price_document(document: &str, currency: &str) -> Option<(String, f64)> {
    let doc: serde_json::Value = serde_json::from_str(document).ok()?;
    let instance_type = doc
        .pointer("/product/attributes/instanceType")?
        .as_str()
        .filter(|t| !t.is_empty())?;
    let terms = doc.pointer("/terms/OnDemand")?.as_object()?;
    let price = terms
        .values()
        .filter_map(|term| term.get("priceDimensions")?.as_object())
        .flat_map(|dims| dims.values())
        .filter_map(|dim| dim.get("pricePerUnit")?.get(currency)?.as_str())
        .filter_map(|p| p.parse::<f64>().ok())
        .find(|p| p.is_finite() && *p > 0.0)?;
    Some((instance_type.to_string(), price))
}

/// The Price List Query API over aws-sdk-pricing.
#[derive(Clone, Debug)]
pub struct SdkPricing {
    client: aws_sdk_pricing::Client,
}

impl SdkPricing {
    /// A client of the Pricing API endpoint that serves `cluster_region`
    /// ([`endpoint_region`]), with `config`'s credentials, retries and HTTP client (and its
    /// endpoint URL, when one overrides every service's). Nothing is called yet.
    pub fn new(config: &aws_config::SdkConfig, cluster_region: &str) -> SdkPricing {
        let pricing = aws_sdk_pricing::config::Builder::from(config)
            .region(aws_config::Region::new(endpoint_region(cluster_region)))
            .build();
        SdkPricing {
            client: aws_sdk_pricing::Client::from_conf(pricing),
        }
    }

    /// Every page of one GetProducts query: [`COMMON_FILTERS`], `regionCode = region` and
    /// `extra`, reduced by [`parse_price_document`].
    async fn query(
        &self,
        region: &str,
        extra: &[(&str, &str)],
    ) -> Result<HashMap<String, f64>, PricingError> {
        let filters = [("regionCode", region)]
            .iter()
            .chain(COMMON_FILTERS.iter())
            .chain(extra.iter())
            .map(|(field, value)| {
                PriceFilter::builder()
                    .r#type(FilterType::TermMatch)
                    .field(*field)
                    .value(*value)
                    .build()
                    .map_err(|e| PricingError {
                        code: "InvalidFilter".into(),
                        message: e.to_string(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let currency = currency(region);
        let mut prices = HashMap::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .client
                .get_products()
                .service_code("AmazonEC2")
                .set_filters(Some(filters.clone()))
                .max_results(PAGE_SIZE)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| {
                    let (code, message) = sdk_error_parts(&e);
                    PricingError { code, message }
                })?;
            prices.extend(
                page.price_list()
                    .iter()
                    .filter_map(|doc| parse_price_document(doc, currency)),
            );
            match page.next_token() {
                Some(next) if !next.is_empty() => token = Some(next.to_string()),
                _ => return Ok(prices),
            }
        }
    }
}

#[async_trait]
impl Pricing for SdkPricing {
    async fn on_demand_prices(&self, region: &str) -> Result<HashMap<String, f64>, PricingError> {
        // One after the other: a refresh runs twice a day, and halving its few seconds is not
        // worth a second concurrent pager against the API's rate limit.
        let shared = self.query(region, &QUERIES[0]).await?;
        let metal = self.query(region, &QUERIES[1]).await?;
        if shared.is_empty() || metal.is_empty() {
            return Err(PricingError {
                code: "NoPrices".into(),
                message: format!(
                    "no on-demand prices for {region} ({} shared, {} bare metal)",
                    shared.len(),
                    metal.len()
                ),
            });
        }
        let mut all = shared;
        all.extend(metal);
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn document(instance_type: &str, usd: &str) -> String {
        format!(
            r#"{{"product":{{"productFamily":"Compute Instance","attributes":{{"instanceType":"{instance_type}","regionCode":"eu-west-1","operatingSystem":"Linux","tenancy":"Shared"}},"sku":"SKU1"}},"serviceCode":"AmazonEC2","terms":{{"OnDemand":{{"SKU1.JRTCKXETXF":{{"priceDimensions":{{"SKU1.JRTCKXETXF.6YS6EN2CT7":{{"unit":"Hrs","pricePerUnit":{{"USD":"{usd}"}}}}}},"sku":"SKU1","offerTermCode":"JRTCKXETXF"}}}}}}}}"#
        )
    }

    #[test]
    fn the_pricing_endpoint_follows_the_clusters_region_as_upstreams() {
        assert_eq!(endpoint_region("eu-west-1"), "eu-central-1");
        assert_eq!(endpoint_region("ap-northeast-1"), "ap-south-1");
        assert_eq!(endpoint_region("cn-north-1"), "cn-northwest-1");
        assert_eq!(endpoint_region("us-west-2"), "us-east-1");
        assert_eq!(endpoint_region("sa-east-1"), "us-east-1");
        assert_eq!(currency("cn-north-1"), "CNY");
        assert_eq!(currency("eu-west-1"), "USD");
    }

    #[test]
    fn a_price_document_gives_its_instance_type_and_hourly_price() {
        assert_eq!(
            parse_price_document(&document("m5.large", "0.1070000000"), "USD"),
            Some(("m5.large".to_string(), 0.107))
        );
        // Zero prices, other currencies, missing types and broken JSON are skipped.
        assert_eq!(
            parse_price_document(&document("m5.large", "0.0000000000"), "USD"),
            None
        );
        assert_eq!(
            parse_price_document(&document("m5.large", "0.107"), "CNY"),
            None
        );
        assert_eq!(parse_price_document(&document("", "0.107"), "USD"), None);
        assert_eq!(parse_price_document("{not json", "USD"), None);
        assert_eq!(
            parse_price_document(&document("m5.large", "n/a"), "USD"),
            None
        );
    }
}

//! GetProducts through the real aws-sdk-pricing client and deserializer, answered by a loopback
//! server that plays back responses in the shape the Price List Query API reference documents
//! (`FormatVersion`, `PriceList` of JSON documents as strings, `NextToken`; moto has no Pricing
//! API): both of upstream's queries are sent with its filters to the endpoint region upstream
//! picks, every page is read, and the answer's m5.large price replaces the vendored table's.
//! The figures are this fixture's (the eu-west-1 list price of m5.large when it was written),
//! not vendored data.

mod recorded;

use std::collections::HashMap;

use ec2api::pricing::{Pricing, SdkPricing};
use karpenter_core::capacity::prices::{PriceSource, PriceTable};
use serde_json::{Value, json};

/// One PriceList document: an on-demand Linux product of `instance_type` in eu-west-1 at `usd`
/// per hour, in the price list's own layout.
fn product(instance_type: &str, family: &str, tenancy: &str, usd: &str) -> String {
    let sku = format!("SKU{}", instance_type.replace('.', "").to_ascii_uppercase());
    let term = format!("{sku}.JRTCKXETXF");
    let rate = format!("{term}.6YS6EN2CT7");
    json!({
        "product": {
            "productFamily": family,
            "attributes": {
                "instanceType": instance_type,
                "regionCode": "eu-west-1",
                "location": "EU (Ireland)",
                "locationType": "AWS Region",
                "operatingSystem": "Linux",
                "tenancy": tenancy,
                "capacitystatus": "Used",
                "preInstalledSw": "NA",
                "marketoption": "OnDemand",
                "licenseModel": "No License required",
                "servicecode": "AmazonEC2",
                "usagetype": format!("EU-BoxUsage:{instance_type}"),
                "operation": "RunInstances"
            },
            "sku": sku
        },
        "serviceCode": "AmazonEC2",
        "terms": {
            "OnDemand": {
                term.clone(): {
                    "priceDimensions": {
                        rate.clone(): {
                            "unit": "Hrs",
                            "endRange": "Inf",
                            "description": format!("${usd} per On Demand Linux {instance_type} Instance Hour"),
                            "appliesTo": [],
                            "rateCode": rate,
                            "beginRange": "0",
                            "pricePerUnit": {"USD": usd}
                        }
                    },
                    "sku": sku,
                    "effectiveDate": "2026-11-01T00:00:00Z",
                    "offerTermCode": "JRTCKXETXF",
                    "termAttributes": {}
                }
            }
        },
        "version": "20261101000000",
        "publicationDate": "2026-11-01T00:00:00Z"
    })
    .to_string()
}

/// One GetProducts page holding `documents`, then `next` if given.
fn page(documents: &[String], next: Option<&str>) -> (u16, String) {
    let mut body = json!({"FormatVersion": "aws_v1", "PriceList": documents});
    if let Some(token) = next {
        body["NextToken"] = json!(token);
    }
    (200, body.to_string())
}

async fn client(server: &recorded::Server, cluster_region: &str) -> SdkPricing {
    let config = ec2api::loader(Some(&server.url))
        .await
        .region(aws_config::Region::new(cluster_region.to_string()))
        .credentials_provider(aws_sdk_pricing::config::Credentials::for_tests())
        .retry_config(aws_config::retry::RetryConfig::disabled())
        .load()
        .await;
    SdkPricing::new(&config, cluster_region)
}

/// The `(Field, Value)` filters of a GetProducts request body.
fn filters(body: &Value) -> HashMap<String, String> {
    body["Filters"]
        .as_array()
        .expect("Filters")
        .iter()
        .map(|f| {
            assert_eq!(f["Type"], "TERM_MATCH", "{f}");
            (
                f["Field"].as_str().expect("Field").to_string(),
                f["Value"].as_str().expect("Value").to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn the_pricing_apis_answer_for_the_region_replaces_the_vendored_prices() {
    let server = recorded::Server::start(
        vec![
            page(
                &[
                    product("m5.large", "Compute Instance", "Shared", "0.1070000000"),
                    // A product without an instance type is skipped, as upstream skips it.
                    product("", "Compute Instance", "Shared", "0.0500000000"),
                ],
                Some("page-2"),
            ),
            page(
                &[product(
                    "m5.xlarge",
                    "Compute Instance",
                    "Shared",
                    "0.2140000000",
                )],
                None,
            ),
            page(
                &[product(
                    "m5.metal",
                    "Compute Instance (bare metal)",
                    "Dedicated",
                    "5.1360000000",
                )],
                None,
            ),
        ],
        "application/x-amz-json-1.1",
    )
    .await;
    let answer = client(&server, "eu-west-1")
        .await
        .on_demand_prices("eu-west-1")
        .await
        .expect("prices");
    let mut priced: Vec<(&str, f64)> = answer.iter().map(|(t, p)| (t.as_str(), *p)).collect();
    priced.sort_by(|a, b| a.0.cmp(b.0));
    assert_eq!(
        priced,
        [
            ("m5.large", 0.107),
            ("m5.metal", 5.136),
            ("m5.xlarge", 0.214)
        ]
    );

    let requests = server.requests();
    assert_eq!(
        requests.len(),
        3,
        "two pages of the shared query, one of bare metal"
    );
    for r in &requests {
        assert_eq!(r.headers["x-amz-target"], "AWSPriceListService.GetProducts");
        // Signed for the Pricing endpoint that serves Europe, not the cluster's region.
        assert!(
            r.headers["authorization"].contains("/eu-central-1/pricing/aws4_request"),
            "{}",
            r.headers["authorization"]
        );
    }
    let bodies: Vec<Value> = requests
        .iter()
        .map(|r| serde_json::from_str(&r.body).expect("JSON body"))
        .collect();
    for b in &bodies {
        assert_eq!(b["ServiceCode"], "AmazonEC2");
        assert_eq!(b["MaxResults"], 100);
        let f = filters(b);
        for (field, value) in [
            ("regionCode", "eu-west-1"),
            ("serviceCode", "AmazonEC2"),
            ("preInstalledSw", "NA"),
            ("operatingSystem", "Linux"),
            ("capacitystatus", "Used"),
            ("marketoption", "OnDemand"),
        ] {
            assert_eq!(f.get(field).map(String::as_str), Some(value), "{b}");
        }
    }
    assert_eq!(filters(&bodies[0])["tenancy"], "Shared");
    assert_eq!(filters(&bodies[0])["productFamily"], "Compute Instance");
    assert_eq!(bodies[0].get("NextToken"), None);
    assert_eq!(bodies[1]["NextToken"], "page-2");
    assert_eq!(filters(&bodies[2])["tenancy"], "Dedicated");
    assert_eq!(
        filters(&bodies[2])["productFamily"],
        "Compute Instance (bare metal)"
    );

    // eu-west-1 has no vendored table: us-east-1's 0.096 stands in until the answer replaces it.
    let table = PriceTable::vendored("eu-west-1").expect("table");
    assert_eq!(table.get("m5.large"), Some(0.096));
    assert!(table.approximate());
    let live = table.with_answer(&answer);
    assert_eq!(live.get("m5.large"), Some(0.107));
    assert_eq!(live.source(), PriceSource::PricingApi);
    assert_eq!(
        live.get("c5.large"),
        table.get("c5.large"),
        "unanswered types keep theirs"
    );
}

#[tokio::test]
async fn a_refused_or_empty_answer_is_an_error_not_an_empty_table() {
    let denied = recorded::Server::start(
        vec![(
            400,
            json!({"__type": "AccessDeniedException", "Message": "not authorized to perform pricing:GetProducts"})
                .to_string(),
        )],
        "application/x-amz-json-1.1",
    )
    .await;
    let err = client(&denied, "us-west-2")
        .await
        .on_demand_prices("us-west-2")
        .await
        .expect_err("denied");
    assert_eq!(err.code, "AccessDeniedException", "{err}");
    assert!(
        denied.requests()[0].headers["authorization"].contains("/us-east-1/pricing/"),
        "us-west-2 is served from us-east-1"
    );

    // The shared query prices something, bare metal nothing: no table is built from half.
    let empty = recorded::Server::start(
        vec![
            page(
                &[product(
                    "m5.large",
                    "Compute Instance",
                    "Shared",
                    "0.1070000000",
                )],
                None,
            ),
            page(&[], None),
        ],
        "application/x-amz-json-1.1",
    )
    .await;
    let err = client(&empty, "eu-west-1")
        .await
        .on_demand_prices("eu-west-1")
        .await
        .expect_err("no bare-metal prices");
    assert_eq!(err.code, "NoPrices", "{err}");
}

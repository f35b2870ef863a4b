//! DescribeCapacityReservations through the real aws-sdk-ec2 client and deserializer, answered by
//! a loopback HTTP server that plays back responses in the shape the EC2 API reference documents
//! (moto does not serve this call): every page is read, each field lands where
//! [`ec2api::CapacityReservationInfo`] says, and the request carries the filters given. (The
//! SDK's own replay client would do, but its `test-util` feature turns on serde_json's
//! `preserve_order` for the whole workspace's test build.)

mod recorded;

use std::collections::BTreeMap;

use ec2api::{CapacityReservationQuery, Ec2, Filter, SdkEc2};

/// One `DescribeCapacityReservationsResponse` page holding `items`, then `next` if given.
fn page(items: &str, next: Option<&str>) -> String {
    let token = next
        .map(|t| format!("<nextToken>{t}</nextToken>"))
        .unwrap_or_default();
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeCapacityReservationsResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
    <requestId>6b9f1e52-0c1a-4a8e-9d3e-2f4c5a7b8c90</requestId>
    <capacityReservationSet>{items}</capacityReservationSet>
    {token}
</DescribeCapacityReservationsResponse>"#
    )
}

/// An On-Demand Capacity Reservation, open-ended, tagged `team=ml`.
const ODCR: &str = r#"
        <item>
            <capacityReservationId>cr-0a1b2c3d4e5f60718</capacityReservationId>
            <ownerId>111122223333</ownerId>
            <capacityReservationArn>arn:aws:ec2:us-west-2:111122223333:capacity-reservation/cr-0a1b2c3d4e5f60718</capacityReservationArn>
            <availabilityZoneId>usw2-az2</availabilityZoneId>
            <instanceType>m5.xlarge</instanceType>
            <instancePlatform>Linux/UNIX</instancePlatform>
            <availabilityZone>us-west-2b</availabilityZone>
            <tenancy>default</tenancy>
            <totalInstanceCount>4</totalInstanceCount>
            <availableInstanceCount>3</availableInstanceCount>
            <ebsOptimized>true</ebsOptimized>
            <ephemeralStorage>false</ephemeralStorage>
            <state>active</state>
            <startDate>2026-03-02T08:00:00.000Z</startDate>
            <endDateType>unlimited</endDateType>
            <instanceMatchCriteria>targeted</instanceMatchCriteria>
            <createDate>2026-03-02T07:58:41.000Z</createDate>
            <tagSet>
                <item>
                    <key>team</key>
                    <value>ml</value>
                </item>
            </tagSet>
            <reservationType>default</reservationType>
        </item>"#;

/// A Capacity Block for ML with an end date.
const BLOCK: &str = r#"
        <item>
            <capacityReservationId>cr-0fedcba9876543210</capacityReservationId>
            <ownerId>111122223333</ownerId>
            <availabilityZoneId>usw2-az1</availabilityZoneId>
            <instanceType>p5.48xlarge</instanceType>
            <instancePlatform>Linux/UNIX</instancePlatform>
            <availabilityZone>us-west-2a</availabilityZone>
            <tenancy>default</tenancy>
            <totalInstanceCount>2</totalInstanceCount>
            <availableInstanceCount>0</availableInstanceCount>
            <state>active</state>
            <startDate>2026-03-10T11:30:00.000Z</startDate>
            <endDate>2026-03-17T11:30:00.000Z</endDate>
            <endDateType>limited</endDateType>
            <instanceMatchCriteria>targeted</instanceMatchCriteria>
            <createDate>2026-03-01T16:12:05.000Z</createDate>
            <tagSet/>
            <reservationType>capacity-block</reservationType>
            <capacityBlockId>cb-0123456789abcdef0</capacityBlockId>
        </item>"#;

/// A loopback EC2 endpoint answering with recorded XML pages.
struct Recorded(recorded::Server);

impl Recorded {
    async fn start(responses: Vec<(u16, String)>) -> Recorded {
        Recorded(recorded::Server::start(responses, "text/xml;charset=UTF-8").await)
    }

    /// The SDK's client of this endpoint.
    async fn client(&self) -> SdkEc2 {
        let config = ec2api::loader(Some(&self.0.url))
            .await
            .region(aws_config::Region::new("us-west-2"))
            .credentials_provider(aws_sdk_ec2::config::Credentials::for_tests())
            .load()
            .await;
        SdkEc2::new(&config)
    }

    /// The form fields of each request the SDK sent (EC2's query protocol posts a form body).
    fn sent(&self) -> Vec<BTreeMap<String, String>> {
        self.0
            .bodies()
            .iter()
            .map(|b| form_urlencoded::parse(b.as_bytes()).into_owned().collect())
            .collect()
    }
}

fn ok(body: String) -> (u16, String) {
    (200, body)
}

#[tokio::test]
async fn capacity_reservations_are_read_from_every_page_with_the_filters_sent() {
    let replay = Recorded::start(vec![
        ok(page(ODCR, Some("page-2-token"))),
        ok(page(BLOCK, None)),
    ])
    .await;
    let ec2 = replay.client().await;
    let found = ec2
        .describe_capacity_reservations(CapacityReservationQuery {
            ids: vec![],
            filters: vec![
                Filter::new("state", "active"),
                Filter::new("tag:team", "ml"),
                Filter::new("instance-match-criteria", "targeted"),
            ],
        })
        .await
        .expect("described");

    assert_eq!(found.len(), 2, "both pages are read: {found:?}");
    let odcr = &found[0];
    assert_eq!(odcr.id, "cr-0a1b2c3d4e5f60718");
    assert_eq!(odcr.instance_type, "m5.xlarge");
    assert_eq!(odcr.zone, "us-west-2b");
    assert_eq!(odcr.total_instance_count, 4);
    assert_eq!(odcr.available_instance_count, 3);
    assert_eq!(odcr.instance_match_criteria, "targeted");
    assert_eq!(odcr.reservation_type, "default");
    assert_eq!(odcr.end_date, None, "an open-ended reservation has no end");
    assert_eq!(odcr.owner_id, "111122223333");
    assert_eq!(odcr.state, "active");
    assert_eq!(
        odcr.tags,
        BTreeMap::from([("team".to_string(), "ml".to_string())])
    );
    let block = &found[1];
    assert_eq!(block.id, "cr-0fedcba9876543210");
    assert_eq!(block.reservation_type, "capacity-block");
    assert_eq!(block.available_instance_count, 0);
    assert_eq!(
        block.end_date,
        Some("2026-03-17T11:30:00Z".parse().expect("timestamp"))
    );
    assert!(block.tags.is_empty());

    let sent = replay.sent();
    assert_eq!(sent.len(), 2, "one request per page");
    let first = &sent[0];
    assert_eq!(first["Action"], "DescribeCapacityReservations");
    assert_eq!(first["Filter.1.Name"], "state");
    assert_eq!(first["Filter.1.Value.1"], "active");
    assert_eq!(first["Filter.2.Name"], "tag:team");
    assert_eq!(first["Filter.2.Value.1"], "ml");
    assert_eq!(first["Filter.3.Name"], "instance-match-criteria");
    assert_eq!(first["Filter.3.Value.1"], "targeted");
    assert_eq!(
        first["MaxResults"], "1000",
        "filter queries ask for full pages"
    );
    assert!(!first.contains_key("NextToken"));
    assert_eq!(sent[1]["NextToken"], "page-2-token");
    assert_eq!(
        sent[1]["Filter.2.Name"], "tag:team",
        "every page keeps the filters"
    );
}

#[tokio::test]
async fn capacity_reservations_by_id_send_the_id_and_no_max_results() {
    let replay = Recorded::start(vec![ok(page(BLOCK, None))]).await;
    let ec2 = replay.client().await;
    let found = ec2
        .describe_capacity_reservations(CapacityReservationQuery {
            ids: vec!["cr-0fedcba9876543210".into()],
            filters: vec![Filter::new("state", "active")],
        })
        .await
        .expect("described");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].instance_type, "p5.48xlarge");

    let sent = replay.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["Action"], "DescribeCapacityReservations");
    assert_eq!(sent[0]["CapacityReservationId.1"], "cr-0fedcba9876543210");
    assert_eq!(sent[0]["Filter.1.Name"], "state");
    // EC2 refuses MaxResults together with ids.
    assert!(!sent[0].contains_key("MaxResults"));
}

#[tokio::test]
async fn an_unknown_reservation_id_is_a_not_found_error() {
    let replay = Recorded::start(vec![(
        400,
        r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>InvalidCapacityReservationId.NotFound</Code><Message>The capacity reservation ID 'cr-0000000000000000a' does not exist</Message></Error></Errors><RequestID>0d9b8c11-6f3e-4b4e-a3b1-99f0e1c2d3e4</RequestID></Response>"#
            .to_string(),
    )])
    .await;
    let ec2 = replay.client().await;
    let err = ec2
        .describe_capacity_reservations(CapacityReservationQuery {
            ids: vec!["cr-0000000000000000a".into()],
            filters: vec![],
        })
        .await
        .expect_err("not found");
    assert_eq!(err.code, "InvalidCapacityReservationId.NotFound");
    assert!(err.is_not_found());
}

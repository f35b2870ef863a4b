//! The parser against the event shapes EC2 and AWS Health send (the AWS documentation's
//! examples, as upstream's interruption tests build them), malformed bodies and no-ops.

use super::*;

fn at(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

#[test]
fn spot_interruption_warning_names_its_instance_and_time() {
    let body = r#"{"version":"0","id":"1e5527d7-bb36-4607-3370-4164db56a40e","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"1970-01-01T00:00:00Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1b:instance/i-0b662ef9931388ba0"],"detail":{"instance-id":"i-0b662ef9931388ba0","instance-action":"terminate"}}"#;
    let m = parse(body).expect("parses");
    assert_eq!(m.kind, Kind::SpotInterrupted);
    assert_eq!(m.instance_ids, vec!["i-0b662ef9931388ba0"]);
    assert_eq!(m.time, Some(at("1970-01-01T00:00:00Z")));
    assert_eq!(m.kind.action(), Action::CordonAndDrain);
    assert_eq!(m.kind.as_str(), "spot_interrupted");
    assert_eq!(m.kind.event_reason(), Some("SpotInterrupted"));
}

#[test]
fn rebalance_recommendation_is_an_event_only() {
    let body = r#"{"version":"0","id":"5d5555d5-dd55-5555-5555-5555dd55d55d","detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2","account":"123456789012","time":"2020-10-26T14:14:14Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1b:instance/i-0b662ef9931388ba0"],"detail":{"instance-id":"i-0b662ef9931388ba0"}}"#;
    let m = parse(body).expect("parses");
    assert_eq!(m.kind, Kind::RebalanceRecommendation);
    assert_eq!(m.instance_ids, vec!["i-0b662ef9931388ba0"]);
    assert_eq!(m.kind.action(), Action::NoAction);
    assert_eq!(m.kind.event_reason(), Some("SpotRebalanceRecommendation"));
    assert!(!m.kind.is_warning());
}

#[test]
fn scheduled_change_names_every_affected_instance() {
    let body = r#"{"version":"0","id":"7bf73129-1428-4cd3-a780-95db273d1602","detail-type":"AWS Health Event","source":"aws.health","account":"123456789012","time":"2019-01-10T18:35:05Z","region":"us-east-1","resources":[],"detail":{"eventArn":"arn:aws:health:us-east-1::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/x","service":"EC2","eventTypeCode":"AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED","eventTypeCategory":"scheduledChange","startTime":"Sat, 05 Jun 2021 14:00:00 GMT","endTime":"Sat, 05 Jun 2021 14:00:00 GMT","eventDescription":[{"language":"en_US","latestDescription":"retirement"}],"affectedEntities":[{"entityValue":"i-01"},{"entityValue":"i-02"}]}}"#;
    let m = parse(body).expect("parses");
    assert_eq!(m.kind, Kind::ScheduledChange);
    assert_eq!(m.instance_ids, vec!["i-01", "i-02"]);
    assert_eq!(m.kind.action(), Action::CordonAndDrain);
    assert_eq!(m.kind.event_reason(), Some("InstanceUnhealthy"));
}

#[test]
fn health_events_of_other_services_or_categories_are_no_ops() {
    for (service, category) in [("EC2", "issue"), ("RDS", "scheduledChange")] {
        let body =
            json!({"version":"0","id":"x","detail-type":"AWS Health Event","source":"aws.health",
            "time":"2019-01-10T18:35:05Z","detail":{"service":service,"eventTypeCategory":category,
            "affectedEntities":[{"entityValue":"i-01"}]}})
            .to_string();
        let m = parse(&body).expect("parses");
        assert_eq!(m.kind, Kind::NoOp, "{service} {category}");
        assert!(m.instance_ids.is_empty());
    }
}

#[test]
fn state_changes_map_to_stopped_terminated_or_nothing() {
    for (state, kind) in [
        ("stopping", Kind::InstanceStopped),
        ("stopped", Kind::InstanceStopped),
        ("shutting-down", Kind::InstanceTerminated),
        ("terminated", Kind::InstanceTerminated),
        ("Terminated", Kind::InstanceTerminated),
        ("running", Kind::NoOp),
        ("pending", Kind::NoOp),
    ] {
        let body = r#"{"version":"0","id":"7bf73129-1428-4cd3-a780-95db273d1602","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","account":"123456789012","time":"2015-11-11T21:29:54Z","region":"us-east-1","resources":["arn:aws:ec2:us-east-1:123456789012:instance/i-abcd1111"],"detail":{"instance-id":"i-abcd1111","state":"STATE"}}"#
            .replace("STATE", state);
        let m = parse(&body).expect("parses");
        assert_eq!(m.kind, kind, "{state}");
    }
    assert_eq!(
        Kind::InstanceStopped.event_reason(),
        Some("InstanceStopping")
    );
    assert_eq!(
        Kind::InstanceTerminated.event_reason(),
        Some("InstanceTerminating")
    );
}

#[test]
fn unknown_events_and_an_empty_body_are_no_ops() {
    let other = r#"{"version":"0","id":"x","detail-type":"EC2 AMI State Change","source":"aws.ec2","time":"2024-01-01T00:00:00Z","detail":{}}"#;
    assert_eq!(parse(other).expect("parses").kind, Kind::NoOp);
    let v1 = r#"{"version":"1","id":"x","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","detail":{"instance-id":"i-1"}}"#;
    assert_eq!(parse(v1).expect("parses").kind, Kind::NoOp);
    assert_eq!(parse("").expect("parses").kind, Kind::NoOp);
}

#[test]
fn malformed_bodies_are_errors_that_say_why() {
    let not_json = parse("{not json").expect_err("not json");
    assert!(matches!(not_json, ParseError::NotAnEvent(_)), "{not_json}");
    let not_event = parse(r#"{"hello":"world"}"#).expect_err("no envelope");
    assert!(
        matches!(not_event, ParseError::NotAnEvent(_)),
        "{not_event}"
    );
    let no_instance = parse(
        r#"{"version":"0","id":"e1","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","detail":{}}"#,
    )
    .expect_err("no instance");
    assert_eq!(
        no_instance.to_string(),
        "EC2 Spot Instance Interruption Warning event \"e1\": detail.instance-id is missing"
    );
    let bad_time = parse(
        r#"{"version":"0","id":"e2","detail-type":"EC2 Instance Rebalance Recommendation","source":"aws.ec2","time":"yesterday","detail":{"instance-id":"i-1"}}"#,
    )
    .expect_err("bad time");
    assert!(bad_time.to_string().contains("not RFC 3339"), "{bad_time}");
}

#[test]
fn the_builders_write_what_the_parser_reads() {
    let t = at("2026-11-26T10:00:00Z");
    let a = ("123456789012", "us-west-2");
    let cases = [
        (
            event::spot_interruption("e1", a.0, a.1, "i-1", t),
            Kind::SpotInterrupted,
            vec!["i-1"],
        ),
        (
            event::rebalance_recommendation("e2", a.0, a.1, "i-1", t),
            Kind::RebalanceRecommendation,
            vec!["i-1"],
        ),
        (
            event::scheduled_change("e3", a.0, a.1, &["i-1", "i-2"], t),
            Kind::ScheduledChange,
            vec!["i-1", "i-2"],
        ),
        (
            event::state_change("e4", a.0, a.1, "i-1", "stopping", t),
            Kind::InstanceStopped,
            vec!["i-1"],
        ),
        (
            event::state_change("e5", a.0, a.1, "i-1", "terminated", t),
            Kind::InstanceTerminated,
            vec!["i-1"],
        ),
    ];
    for (body, kind, ids) in cases {
        let m = parse(&body).expect("parses");
        assert_eq!(
            (m.kind, m.instance_ids),
            (kind, ids.iter().map(|s| s.to_string()).collect())
        );
        assert_eq!(m.time, Some(t));
    }
}

#[test]
fn history_reasons_round_trip() {
    for k in [
        Kind::SpotInterrupted,
        Kind::ScheduledChange,
        Kind::InstanceStopped,
        Kind::InstanceTerminated,
    ] {
        let r = k.history_reason().expect("a removal reason");
        assert_eq!(Kind::from_history_reason(r), Some(k));
    }
    assert_eq!(Kind::RebalanceRecommendation.history_reason(), None);
}

#[test]
fn instance_ids_come_from_aws_provider_ids_only() {
    assert_eq!(
        instance_id("aws:///us-west-2a/i-0123456789abcdef0"),
        Some("i-0123456789abcdef0")
    );
    assert_eq!(instance_id("kwok://node-1"), None);
    assert_eq!(instance_id("aws:///us-west-2a/"), None);
}

//! `fail-node`: the condition syntax, the annotation patch, the output, and the exit codes
//! against a sandbox API server (no kubelet runs there, so nothing is ever reported; the
//! scenario tests in `tests/tests/repair.rs` see a kubelet report it).

use super::*;
use clap::Parser;
use testutil::node;

/// `karpenter sandbox fail-node ...` as clap parses it.
#[derive(Parser, Debug)]
struct Cli {
    #[command(flatten)]
    args: FailNodeArgs,
}

fn parse(argv: &[&str]) -> Result<FailNodeArgs, clap::Error> {
    Cli::try_parse_from(std::iter::once("fail-node").chain(argv.iter().copied())).map(|c| c.args)
}

fn t(s: &str) -> Timestamp {
    s.parse().expect("timestamp")
}

#[test]
fn the_cli_is_well_formed_with_defaults() {
    use clap::CommandFactory;
    Cli::command().debug_assert();
    let args = parse(&["ip-10-0-1-5"]).expect("defaults");
    assert_eq!(args.node, "ip-10-0-1-5");
    assert_eq!(
        args.condition,
        Condition {
            type_: "Ready".into(),
            status: "False".into()
        }
    );
    assert_eq!(args.held_for, Duration::ZERO);
    assert!(!args.heal);
    let args = parse(&[
        "n1",
        "--condition",
        "AcceleratedHardwareReady=False",
        "--for",
        "31m",
    ])
    .expect("flags");
    assert_eq!(args.condition.type_, "AcceleratedHardwareReady");
    assert_eq!(args.held_for, Duration::from_secs(31 * 60));
    assert!(
        parse(&["n1", "--heal", "--for", "1m"]).is_err(),
        "--heal fails nothing"
    );
}

#[test]
fn conditions_are_type_equals_status() {
    for good in [
        "Ready=False",
        "Ready=Unknown",
        "KernelReady=True",
        "example.com_X-1=False",
    ] {
        assert!(parse_condition(good).is_ok(), "{good}");
    }
    for bad in [
        "Ready",
        "Ready=false",
        "Ready=",
        "=False",
        "Ready=False=1",
        "Rea dy=False",
    ] {
        let e = parse_condition(bad).expect_err(bad);
        assert!(
            e.contains("expected Type=Status with Status True, False or Unknown, e.g. Ready=False"),
            "{bad}: {e}"
        );
    }
    let e = parse(&["n1", "--condition", "Ready"]).expect_err("refused");
    assert!(e.to_string().contains("expected Type=Status"), "{e}");
}

#[test]
fn the_patch_sets_one_failure_or_removes_them_all() {
    let since = t("2026-01-01T00:29:00Z");
    let current = node("n1")
        .annotation(
            "fail.sandbox.karpenter.sh/Ready",
            "False since 2026-01-01T00:00:00Z",
        )
        .annotation(
            "fail.sandbox.karpenter.sh/KernelReady",
            "False since 2026-01-01T00:00:00Z",
        )
        .annotation("team", "a")
        .build();
    let args = parse(&["n1", "--condition", "Ready=Unknown"]).expect("args");
    assert_eq!(
        patch(&args, &current, since),
        json!({"metadata": {"annotations": {
            "fail.sandbox.karpenter.sh/Ready": "Unknown since 2026-01-01T00:29:00Z"}}})
    );
    let heal = parse(&["n1", "--heal"]).expect("args");
    assert_eq!(
        patch(&heal, &current, since),
        json!({"metadata": {"annotations": {
            "fail.sandbox.karpenter.sh/KernelReady": null,
            "fail.sandbox.karpenter.sh/Ready": null}}})
    );
}

#[test]
fn the_output_says_since_when_how_to_heal_and_when_repair_acts() {
    let now = t("2026-01-01T01:00:00Z");
    let render_to_string = |outcome: &Outcome| {
        let mut out = Vec::new();
        render(&mut out, outcome, now).expect("render");
        String::from_utf8(out).expect("utf-8")
    };
    let failed = Outcome::Failed {
        node: "n1".into(),
        condition: parse_condition("Ready=False").expect("condition"),
        since: t("2026-01-01T00:29:00Z"),
    };
    assert_eq!(
        render_to_string(&failed),
        "node/n1 reports Ready=False since 2026-01-01T00:29:00Z (31m ago)\n\
         Its simulated kubelet keeps reporting it until `karpenter sandbox fail-node n1 --heal`.\n\
         Node repair (FEATURE_GATES=NodeRepair=true) replaces the node once Ready=False has held \
         for 30m.\n"
    );
    let other = Outcome::Failed {
        node: "n1".into(),
        condition: parse_condition("BadNode=True").expect("condition"),
        since: now,
    };
    assert!(
        render_to_string(&other).ends_with(
            "No repair policy matches BadNode=True: node repair leaves the node alone.\n"
        )
    );
    assert_eq!(
        render_to_string(&Outcome::Healed { node: "n1".into() }),
        "node/n1 healed: its kubelet reports Ready=True and no failed condition\n"
    );
}

/// Against a sandbox API server without kubelets: an unknown node is exit 1; a known one is
/// annotated but never reported (exit 1, naming the sandbox); an API server that is not there
/// is exit 2.
#[tokio::test]
async fn exit_codes_against_an_api_server() {
    let server = sandbox::runtime::Sandbox::start(0).await.expect("sandbox");
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_kubeconfig(&kubeconfig).expect("kubeconfig");
    let args = |node: &str| {
        let mut a = parse(&[node, "--for", "31m", "--timeout", "300ms"]).expect("args");
        a.kubeconfig = Some(kubeconfig.clone());
        a
    };
    let now = t("2026-01-01T01:00:00Z");

    let e = fail(&args("missing"), now).await.expect_err("no such node");
    assert!(
        matches!(&e, FailNodeError::NotFound(n) if n == "missing"),
        "{e}"
    );
    assert_eq!(e.exit_code(), 1);

    let nodes = server.store().resource("", "v1", "nodes").expect("nodes");
    let n1 = serde_json::to_value(node("n1").ready("True").build()).expect("json");
    server.store().create(&nodes, "", n1).expect("create n1");
    let e = fail(&args("n1"), now).await.expect_err("no kubelet");
    assert!(matches!(e, FailNodeError::NotReported { .. }), "{e}");
    assert_eq!(e.exit_code(), 1);
    assert!(e.to_string().contains("karpenter sandbox"), "{e}");
    let annotated = server.store().get(&nodes, "", "n1").expect("n1 is there");
    assert_eq!(
        annotated["metadata"]["annotations"]["fail.sandbox.karpenter.sh/Ready"],
        "False since 2026-01-01T00:29:00Z",
        "annotated, dated back 31 minutes"
    );

    let addr = server.addr();
    drop(server);
    let closed = dir.path().join("closed");
    std::fs::write(
        &closed,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: \
             http://{addr}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: c\n\
             current-context: c\nusers:\n- name: c\n  user: {{}}\n"
        ),
    )
    .expect("kubeconfig");
    let mut gone = args("n1");
    gone.kubeconfig = Some(closed);
    let e = fail(&gone, now).await.expect_err("nothing listens");
    assert!(matches!(e, FailNodeError::Connect(_)), "{e}");
    assert_eq!(e.exit_code(), 2);
    let mut unreadable = args("n1");
    unreadable.kubeconfig = Some(dir.path().join("absent"));
    assert_eq!(
        fail(&unreadable, now)
            .await
            .expect_err("no kubeconfig")
            .exit_code(),
        2
    );
}

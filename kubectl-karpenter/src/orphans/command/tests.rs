//! Picking orphans by name and writing the list (the parts of the commands that need no cluster).

use super::*;
use crate::orphans::fixtures::{checked, orphans, world};

fn list_args(output: OrphansOutput) -> OrphansListArgs {
    let cli = crate::cli::parse_from(
        ["kubectl-karpenter", "orphans"]
            .iter()
            .map(Into::into)
            .collect(),
    )
    .expect("parse");
    let crate::cli::Command::Orphans(args) = cli.command else {
        panic!("orphans expected");
    };
    OrphansListArgs {
        output,
        ..args.list
    }
}

#[test]
fn select_by_name_qualified_name_or_all() {
    let w = world();
    let found = orphans(&w, &checked(&w));
    let names = |v: Vec<Orphan>| -> Vec<String> { v.into_iter().map(|o| o.name).collect() };
    let picked = select(
        &found,
        &["gpu-stuck".into(), "instance/i-0a1b2c3d4e5f60005".into()],
        false,
    )
    .expect("known");
    assert_eq!(names(picked), ["gpu-stuck", "i-0a1b2c3d4e5f60005"]);
    assert_eq!(select(&found, &[], true).expect("all").len(), 6);
    let err = select(&found, &["gpu-stuck".into(), "nope".into()], false).expect_err("unknown");
    assert_eq!(
        err.to_string(),
        "not an orphan: nope; `kubectl karpenter orphans` lists them (NAME column): \
         default-unlaunched, default-unregistered, gpu-stuck, ip-10-0-2-5, i-0a1b2c3d4e5f60005, \
         default-lost"
    );
    let err = select(&[], &["x".into()], false).expect_err("none");
    assert!(err.to_string().ends_with("; there are none now"), "{err}");
}

fn write(output: OrphansOutput, found: &[Orphan]) -> (Outcome, String, String) {
    let w = world();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let io = Io {
        out: &mut out,
        err: &mut err,
        color: false,
    };
    let outcome = write_list(
        &list_args(output),
        found,
        &checked(&w),
        crate::fixtures::now(),
        io,
    )
    .expect("write");
    (
        outcome,
        String::from_utf8(out).expect("utf-8"),
        String::from_utf8(err).expect("utf-8"),
    )
}

#[test]
fn exit_outcome_and_empty_lists() {
    let w = world();
    let found = orphans(&w, &checked(&w));
    let (outcome, out, err) = write(OrphansOutput::Table, &found);
    assert_eq!(outcome, Outcome::Found);
    assert!(out.starts_with("KIND "), "{out}");
    assert_eq!(err, "");
    for format in [
        OrphansOutput::Table,
        OrphansOutput::Wide,
        OrphansOutput::Name,
    ] {
        let (outcome, out, err) = write(format, &[]);
        assert_eq!(outcome, Outcome::Clean);
        assert_eq!((out.as_str(), err.as_str()), ("", "No orphans found\n"));
    }
    let (outcome, out, err) = write(OrphansOutput::Json, &[]);
    assert_eq!(outcome, Outcome::Clean);
    assert!(out.contains("\"items\": []"), "{out}");
    assert_eq!(err, "");
}

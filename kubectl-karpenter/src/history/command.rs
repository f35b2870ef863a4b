//! `history` against the cluster: lists the ConfigMap `karpenter-disruption-history` (in every
//! namespace, or the one `-n` names), reads its records, warns about lines it cannot read, and
//! prints the records `--nodepool` and `--since` select.

use std::io::Write;

use crds::history::{self, CONFIGMAP_NAME, Parsed, RECORDS_KEY, Record};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};

use super::args::{HistoryArgs, HistoryOutput};
use super::render;
use super::report::{Filter, select};
use crate::global_args::GlobalArgs;
use crate::render::TableOptions;
use crate::session::{Connection, Error, Io, Outcome};

/// `history`. Always exit 0 when the history could be read: it reports, it finds no problems.
///
/// Errors: the cluster could not be read; it does not serve Karpenter's CRDs
/// ([`Error::NotInstalled`]: no history there is not an empty history); writing failed.
pub async fn run<O: Write, E: Write>(
    global: &GlobalArgs,
    args: &HistoryArgs,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    let conn = Connection::open(global).await?;
    conn.require_karpenter().await?;
    let histories = read_histories(&conn, global.namespace.as_deref(), &mut *io.err).await?;
    let now = Timestamp::now();
    let filter = Filter::new(args.nodepool.clone(), args.since, now);
    let records = select(&histories, &filter);
    write_records(args.output, !args.no_headers, &records, now, io)
}

/// The history ConfigMaps (`karpenter-disruption-history`) in namespace `namespace`, or in
/// every namespace, read with [`read`] (warnings on `err`).
///
/// Errors: listing ConfigMaps failed; writing a warning failed.
pub async fn read_histories(
    conn: &Connection,
    namespace: Option<&str>,
    err: &mut impl Write,
) -> Result<Vec<Parsed>, Error> {
    let api: Api<ConfigMap> = match namespace {
        Some(ns) => Api::namespaced(conn.client.clone(), ns),
        None => Api::all(conn.client.clone()),
    };
    let params = ListParams::default().fields(&format!("metadata.name={CONFIGMAP_NAME}"));
    let maps = conn.list_or_empty(&api, &params, "ConfigMaps").await?;
    read(&maps, err)
}

/// The history of each ConfigMap, with a warning on `err` for each line that is not a record
/// (it is skipped).
///
/// Errors: writing a warning failed.
pub fn read(maps: &[ConfigMap], err: &mut impl Write) -> Result<Vec<Parsed>, Error> {
    let mut out = Vec::new();
    for cm in maps {
        let text = cm
            .data
            .as_ref()
            .and_then(|d| d.get(RECORDS_KEY))
            .map(String::as_str)
            .unwrap_or_default();
        let parsed = history::parse(text);
        for m in &parsed.malformed {
            writeln!(
                err,
                "warning: configmap {}/{}: {m}; skipped",
                cm.metadata.namespace.as_deref().unwrap_or_default(),
                cm.metadata.name.as_deref().unwrap_or_default()
            )?;
        }
        out.push(parsed);
    }
    Ok(out)
}

/// Prints `records` in `format` ("No resources found" on stderr when there are none and the
/// format is a table).
///
/// Errors: writing or serializing failed.
pub fn write_records<O: Write, E: Write>(
    format: HistoryOutput,
    headers: bool,
    records: &[Record],
    now: Timestamp,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    let table = |wide| TableOptions {
        wide,
        headers,
        color: io.color,
    };
    match format {
        HistoryOutput::Table | HistoryOutput::Wide if records.is_empty() => {
            writeln!(io.err, "No resources found")?
        }
        HistoryOutput::Table => render::write_table(io.out, records, now, table(false))?,
        HistoryOutput::Wide => render::write_table(io.out, records, now, table(true))?,
        HistoryOutput::Json => render::write_document(io.out, records, false)?,
        HistoryOutput::Yaml => render::write_document(io.out, records, true)?,
    }
    io.out.flush()?;
    Ok(Outcome::Clean)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn unreadable_lines_are_skipped_with_a_warning() {
        let good = history::render(&crate::history::render::tests::sample()[..1]);
        let cm = ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(CONFIGMAP_NAME.into()),
                namespace: Some("karpenter".into()),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(
                RECORDS_KEY.to_string(),
                format!("{good}{{broken\n"),
            )])),
            ..Default::default()
        };
        let empty = ConfigMap::default();
        let mut err = Vec::new();
        let parsed = read(&[cm, empty], &mut err).expect("read");
        assert_eq!(parsed[0].records.len(), 1);
        assert!(parsed[1].records.is_empty());
        let err = String::from_utf8(err).expect("utf-8");
        assert!(
            err.starts_with(
                "warning: configmap karpenter/karpenter-disruption-history: line 2 of \
                 karpenter-disruption-history records.jsonl is not a disruption record: "
            ),
            "{err}"
        );
        assert!(err.trim_end().ends_with("; skipped"), "{err}");
    }

    #[test]
    fn nothing_to_list_is_not_an_error() {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let io = Io {
            out: &mut out,
            err: &mut err,
            color: false,
        };
        let outcome = write_records(HistoryOutput::Table, true, &[], Timestamp::now(), io);
        assert_eq!(outcome.ok(), Some(Outcome::Clean));
        assert!(out.is_empty());
        assert_eq!(String::from_utf8_lossy(&err), "No resources found\n");
        let mut out = Vec::new();
        let io = Io {
            out: &mut out,
            err: &mut Vec::new(),
            color: false,
        };
        write_records(HistoryOutput::Json, true, &[], Timestamp::now(), io).expect("json");
        assert_eq!(String::from_utf8_lossy(&out).trim(), "[]");
    }
}

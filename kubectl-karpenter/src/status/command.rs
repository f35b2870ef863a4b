//! `kubectl karpenter status` against the cluster: lists NodePools, NodeClaims and Nodes (only
//! those of `--nodepool` and matching `-l` when given), the pods that are not Succeeded or
//! Failed (one list call over every namespace, summed per node) and the EC2NodeClasses, builds
//! the document and prints it once, or with `--watch` reads again every `--interval` and hands
//! each document to the [`Printer`] until Ctrl-C. While watching, the pods come from one watch
//! ([`PodFeed`]) rather than a list of every pod on each refresh.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use crds::{EC2NodeClass, NodePool};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};

use super::document::{Document, Snapshot, View};
use super::keys::{QuitKeys, RawMode};
use super::pod_feed::{ACTIVE_PODS, PodFeed};
use super::print::{Print, silent_when_empty, write_document};
use super::rows::{NoPrices, PriceBook};
use super::watch::{AlternateScreen, Printer, Screen};
use crate::cli::StatusArgs;
use crate::global_args::GlobalArgs;
use crate::price::CatalogPrices;
use crate::session::{Connection, Error, Io, Outcome};

/// `status`: prints once, or watches with `--watch`.
///
/// Errors: the cluster could not be read (at the first read when watching), or writing failed.
pub async fn run<O: Write, E: Write>(
    global: &GlobalArgs,
    args: &StatusArgs,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    let conn = Connection::open(global).await?;
    let prices: Box<dyn PriceBook> = match CatalogPrices::embedded() {
        Ok(p) => Box::new(p),
        Err(e) => {
            writeln!(io.err, "warning: prices unavailable: {e}")?;
            Box::new(NoPrices)
        }
    };
    let view = View {
        nodepool: args.nodepool.clone(),
        sort: args.sort_by,
    };
    if args.watch {
        let screen = if std::io::stdout().is_terminal() {
            let (cols, rows) = terminal_size();
            Screen::Redraw { cols, rows }
        } else {
            Screen::Stream
        };
        let watch = Watch {
            conn: &conn,
            view: &view,
            selector: args.selector.as_deref(),
            prices: prices.as_ref(),
            interval: args.interval.0,
            pods: PodFeed::start(conn.client.clone()),
        };
        let print = print(args, io.color);
        return watch_loop(watch, print, screen, io).await;
    }
    let snapshot = read(
        &conn,
        args.nodepool.as_deref(),
        args.selector.as_deref(),
        None,
    )
    .await?;
    let doc = Document::build(&snapshot, &view, Timestamp::now(), prices.as_ref());
    write_status(args, &doc, io)?;
    Ok(Outcome::Clean)
}

/// Prints `doc` as `args` asks. Like kubectl, a table or name list with no NodeClaim rows also
/// says "No resources found" on stderr; the NodePool section and totals of a table with
/// headers are still printed.
///
/// Errors: writing or serializing failed.
pub fn write_status<O: Write, E: Write>(
    args: &StatusArgs,
    doc: &Document,
    io: Io<'_, O, E>,
) -> Result<(), Error> {
    let no_rows = doc.node_claims.is_empty() && silent_when_empty(args.output);
    let blank = no_rows
        && (args.output == crate::cli::OutputFormat::Name
            || args.no_headers
            || doc.node_pools.is_empty());
    if !blank {
        write_document(io.out, doc, print(args, io.color))?;
        io.out.flush()?;
    }
    if no_rows {
        writeln!(io.err, "No resources found")?;
    }
    Ok(())
}

fn print(args: &StatusArgs, color: bool) -> Print {
    Print {
        format: args.output,
        headers: !args.no_headers,
        color,
        compact: false,
    }
}

/// Reads the NodePools, NodeClaims and Nodes (of `nodepool` only, when given, by the
/// `karpenter.sh/nodepool` label, and only those matching the label `selector`, when given),
/// every pod not Succeeded or Failed (`pods` when the caller already has them: no list) and
/// every EC2NodeClass, each in one list call. A server without the NodePool CRD has no
/// NodePools; one without the NodeClaim CRD is an error. EC2NodeClasses only explain the
/// LIMITED-BY column: without their CRD, or when the user may not list them (403), there are
/// none.
///
/// Errors: [`Error::NotInstalled`], [`Error::List`], [`Error::ListOther`] (e.g. Nodes or Pods
/// not readable with the user's RBAC);
/// [`Error::UnknownNodePool`] when `nodepool` names no NodePool and no NodeClaim carries it.
pub async fn read(
    conn: &Connection,
    nodepool: Option<&str>,
    selector: Option<&str>,
    pods: Option<Vec<Arc<Pod>>>,
) -> Result<Snapshot, Error> {
    let mut params = ListParams::default();
    let pool = nodepool.map(|pool| format!("{}={pool}", crds::labels::NODEPOOL_LABEL));
    let labels: Vec<&str> = pool.as_deref().into_iter().chain(selector).collect();
    if !labels.is_empty() {
        params = params.labels(&labels.join(","));
    }
    let claims = conn.nodeclaims(&params).await?;
    // Few NodePools: list them all; the document keeps the one `--nodepool` names.
    let pools = conn.list_all::<NodePool>("NodePools").await?;
    // NodeClaims of a deleted NodePool still show; a name nothing carries is a typo.
    if let Some(pool) = nodepool.filter(|_| claims.is_empty()) {
        conn.require_nodepool(&pools, pool)?;
    }
    let nodes: Api<Node> = Api::all(conn.client.clone());
    let nodes = conn.list_or_empty(&nodes, &params, "Nodes").await?;
    // Pods carry no NodePool label: all of them, summed by node name in the document.
    let pods = match pods {
        Some(pods) => pods,
        None => {
            let api: Api<Pod> = Api::all(conn.client.clone());
            let active = ListParams::default().fields(ACTIVE_PODS);
            let listed = conn.list_or_empty(&api, &active, "Pods").await?;
            listed.into_iter().map(Arc::new).collect()
        }
    };
    let classes: Api<EC2NodeClass> = Api::all(conn.client.clone());
    let node_classes = conn
        .list_or_empty(&classes, &ListParams::default(), "EC2NodeClasses")
        .await;
    Ok(Snapshot {
        pools,
        claims,
        nodes,
        pods,
        node_classes: forbidden_is_empty(node_classes)?,
    })
}

/// The objects of a list call whose kind is optional to the view: a 403 (the user's RBAC does
/// not allow the list) reads as none; other errors stay errors.
///
/// Errors: `listed`'s error, unless it is a 403.
fn forbidden_is_empty<K>(listed: Result<Vec<K>, Error>) -> Result<Vec<K>, Error> {
    match listed {
        Err(Error::ListOther { source, .. }) if matches!(source.as_ref(), kube::Error::Api(status) if status.code == 403) => {
            Ok(Vec::new())
        }
        other => other,
    }
}

/// The terminal's width and height, each when it reports one (a pseudo-terminal may report 0).
fn terminal_size() -> (Option<u16>, Option<u16>) {
    let size = crossterm::terminal::size().ok();
    let known = |n: u16| (n > 0).then_some(n);
    (
        size.and_then(|(cols, _)| known(cols)),
        size.and_then(|(_, rows)| known(rows)),
    )
}

/// Resolves on Ctrl-C; never when no handler could be installed (Ctrl-C then ends the process
/// as usual). The handler is installed when the future is first polled.
async fn ctrl_c() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// What one `--watch` reads and how it builds each document.
struct Watch<'a> {
    conn: &'a Connection,
    view: &'a View,
    /// `-l`: the label selector of NodeClaims and Nodes.
    selector: Option<&'a str>,
    prices: &'a dyn PriceBook,
    /// `--interval`.
    interval: Duration,
    /// The pods, kept by a watch once it has listed them.
    pods: PodFeed,
}

impl Watch<'_> {
    async fn read(&self) -> Result<Snapshot, Error> {
        let pods = self.pods.pods();
        read(
            self.conn,
            self.view.nodepool.as_deref(),
            self.selector,
            pods,
        )
        .await
    }

    /// Shows `first`, then reads and shows again every `interval` until `stop` resolves
    /// (Ctrl-C), which also cuts a read short. Reads that fail are reported and retried.
    async fn poll(
        &self,
        first: Snapshot,
        printer: &mut Printer,
        out: &mut impl Write,
        err: &mut impl Write,
        mut stop: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
    ) -> Result<(), Error> {
        let mut snapshot: Result<Snapshot, Error> = Ok(first);
        let mut said_empty = false;
        loop {
            let now = Timestamp::now();
            if matches!(printer.screen(), Screen::Redraw { .. }) {
                let (cols, rows) = terminal_size();
                printer.resize(cols, rows);
            }
            match snapshot {
                Ok(s) => {
                    let doc = Document::build(&s, self.view, now, self.prices);
                    let shown = printer.show(out, &doc, now)?;
                    let pipe = printer.screen() == Screen::Stream;
                    if pipe && !shown && !said_empty && doc.is_empty() {
                        writeln!(err, "No resources found")?;
                        said_empty = true;
                    }
                }
                Err(e) => printer.warn(out, err, &e.to_string(), now)?,
            }
            tokio::select! {
                () = &mut stop => return Ok(()),
                () = tokio::time::sleep(self.interval) => {}
            }
            snapshot = tokio::select! {
                () = &mut stop => return Ok(()),
                s = self.read() => s,
            };
        }
    }
}

async fn watch_loop<O: Write, E: Write>(
    watch: Watch<'_>,
    print: Print,
    screen: Screen,
    io: Io<'_, O, E>,
) -> Result<Outcome, Error> {
    let mut stop = std::pin::pin!(ctrl_c());
    // Poll Ctrl-C once so its handler is in place before anything else happens: from here on
    // Ctrl-C ends the watch through `stop` (restoring the terminal), not the process.
    tokio::select! {
        biased;
        () = &mut stop => return Ok(Outcome::Clean),
        () = std::future::ready(()) => {}
    }
    // The first read fails the command, as a plain `status` would, before the screen changes.
    let first = tokio::select! {
        () = &mut stop => return Ok(Outcome::Clean),
        s = watch.read() => s?,
    };
    let mut printer = Printer::new(screen, print, watch.interval);
    if !matches!(screen, Screen::Redraw { .. }) {
        watch
            .poll(first, &mut printer, io.out, io.err, stop)
            .await?;
        return Ok(Outcome::Clean);
    }
    let result = {
        let mut terminal = AlternateScreen::enter(io.out)?;
        // Raw mode after the alternate screen, so that it ends first; `q`, Esc and Ctrl-C are
        // keys then (Ctrl-C stays a signal when the terminal cannot be switched).
        let raw = RawMode::enter();
        let mut keys = raw.on().then(QuitKeys::start);
        let quit = async {
            match keys.as_mut() {
                Some(keys) => tokio::select! {
                    () = stop => {}
                    () = keys.pressed() => {}
                },
                None => stop.await,
            }
        };
        let quit = std::pin::pin!(quit);
        watch
            .poll(first, &mut printer, terminal.out(), io.err, quit)
            .await
        // Leaving the block stops the key reader and restores the terminal, also when `poll`
        // failed.
    };
    if let Some(frame) = printer.last_frame() {
        io.out.write_all(frame.as_bytes())?;
        io.out.flush()?;
    }
    result.map(|()| Outcome::Clean)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::OutputFormat;
    use crate::status::fixtures;
    use crate::status::sort::SortBy;

    fn args(output: OutputFormat) -> StatusArgs {
        StatusArgs {
            output,
            nodepool: None,
            no_headers: false,
            watch: false,
            interval: crate::status::interval::Interval::default(),
            selector: None,
            sort_by: SortBy::default(),
        }
    }

    fn render(args: &StatusArgs, snapshot: &Snapshot) -> (String, String) {
        let doc = Document::build(
            snapshot,
            &View::default(),
            fixtures::now(),
            &fixtures::FixedPrices,
        );
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let io = Io {
            out: &mut out,
            err: &mut err,
            color: false,
        };
        write_status(args, &doc, io).expect("render");
        (
            String::from_utf8(out).expect("utf-8"),
            String::from_utf8(err).expect("utf-8"),
        )
    }

    #[test]
    fn empty_table_says_no_resources_on_stderr() {
        let empty = Snapshot::default();
        for format in [OutputFormat::Table, OutputFormat::Wide, OutputFormat::Name] {
            let (out, err) = render(&args(format), &empty);
            assert_eq!(out, "");
            assert_eq!(err, "No resources found\n");
        }
        let (out, err) = render(&args(OutputFormat::Json), &empty);
        assert!(out.contains("\"nodeClaims\": []"), "{out}");
        assert_eq!(err, "");
        // NodePools without NodeClaims: the NodePool section and zero totals; no names.
        let pools_only = Snapshot {
            pools: fixtures::pools(),
            ..Snapshot::default()
        };
        let (out, err) = render(&args(OutputFormat::Table), &pools_only);
        assert!(out.starts_with("NODEPOOL "), "{out}");
        assert!(out.ends_with("\n\n0 nodeclaims: 0 ready, 0 drifted, 0 in flight (0 launching, 0 registering, 0 initializing), 0 terminating; $0.0000/hour\n"), "{out}");
        assert_eq!(err, "No resources found\n");
        // --no-headers leaves no NodePool section: nothing on stdout, the note on stderr.
        let mut bare = args(OutputFormat::Table);
        bare.no_headers = true;
        let (out, err) = render(&bare, &pools_only);
        assert_eq!((out.as_str(), err.as_str()), ("", "No resources found\n"));
        let (out, err) = render(&args(OutputFormat::Name), &pools_only);
        assert_eq!((out.as_str(), err.as_str()), ("", "No resources found\n"));
    }

    #[test]
    fn node_classes_the_user_may_not_list_are_none() {
        let failed = |code: u16| -> Result<Vec<EC2NodeClass>, Error> {
            Err(Error::ListOther {
                what: "EC2NodeClasses",
                server: "https://127.0.0.1:6443".into(),
                context: "test".into(),
                source: Box::new(kube::Error::Api(Box::new(
                    kube::core::Status::failure("no", "Forbidden").with_code(code),
                ))),
            })
        };
        assert_eq!(forbidden_is_empty(failed(403)).expect("403 is none"), []);
        let err = forbidden_is_empty(failed(500)).expect_err("500 stays an error");
        assert!(err.to_string().contains("EC2NodeClasses"), "{err}");
        let listed = vec![testutil::ec2nodeclass("default").build()];
        assert_eq!(forbidden_is_empty(Ok(listed.clone())).expect("ok"), listed);
    }

    #[test]
    fn names_follow_the_table_order() {
        let snapshot = fixtures::snapshot();
        let (out, _) = render(&args(OutputFormat::Name), &snapshot);
        let names: Vec<&str> = out.lines().collect();
        assert_eq!(
            names,
            [
                "nodeclaim.karpenter.sh/default-abcde",
                "nodeclaim.karpenter.sh/default-drift",
                "nodeclaim.karpenter.sh/default-fghij",
                "nodeclaim.karpenter.sh/default-klmno",
                "nodeclaim.karpenter.sh/gpu-pqrst",
                "nodeclaim.karpenter.sh/gpu-uvwxy",
                "nodeclaim.karpenter.sh/stray",
            ]
        );
    }
}

//! Runs a parsed command: loads the kubeconfig, lists NodeClaims from the API server, and hands
//! them to the pure row builder and renderers; `orphans`, `drift explain` and `upgrade` run
//! through their own `command` modules. Network I/O happens here, in those `command` modules,
//! `orphans::cloud` and `orphans::execute`.

use std::io::{self, Write};

use crds::NodeClaim;
use jiff::Timestamp;
use kube::api::{Api, ListParams};

use crate::cli::{Cli, Command, DriftAction, GlobalArgs, OrphansAction, OutputFormat, StatusArgs};
use crate::kubeconfig::{self, Loaded};
use crate::orphans::cloud::CloudError;
use crate::orphans::command::{self as orphans, Prompt};
use crate::output::{self, OutputError};
use crate::price::CatalogPrices;
use crate::render::{self, TableOptions};
use crate::status::{self, NoPrices, PriceBook};

/// Why a command failed (printed as `error: …`, exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No usable kubeconfig or context.
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
    /// The client could not be built from the configuration.
    #[error("creating a client for context \"{context}\": {}", causes(source))]
    Client {
        /// The context.
        context: String,
        /// What failed.
        source: kube::Error,
    },
    /// The server does not serve NodeClaims.
    #[error(
        "the server at {server} (context \"{context}\") does not serve nodeclaims.karpenter.sh/v1; \
         install Karpenter's CRDs or pick the cluster that runs Karpenter with --context"
    )]
    NotInstalled {
        /// API server URL.
        server: String,
        /// The context.
        context: String,
    },
    /// Listing NodeClaims failed.
    #[error(
        "listing NodeClaims from {server} (context \"{context}\"): {}; check that the \
         cluster is reachable and that --context/--kubeconfig name the right one",
        causes(source)
    )]
    List {
        /// API server URL.
        server: String,
        /// The context.
        context: String,
        /// What failed.
        source: kube::Error,
    },
    /// Listing another kind of object failed.
    #[error(
        "listing {what} from {server} (context \"{context}\"): {}; check that the cluster is \
         reachable and that --context/--kubeconfig name the right one",
        causes(source.as_ref())
    )]
    ListOther {
        /// What was listed, e.g. `Nodes`.
        what: &'static str,
        /// API server URL.
        server: String,
        /// The context.
        context: String,
        /// What failed.
        source: Box<kube::Error>,
    },
    /// The cloud could not be read or changed.
    #[error(transparent)]
    Cloud(#[from] CloudError),
    /// `orphans delete NAME…` named something that is not an orphan.
    #[error(
        "not an orphan: {}; `kubectl karpenter orphans` lists them (NAME column){}",
        names.join(", "),
        if available.is_empty() { "; there are none now".to_owned() } else { format!(": {}", available.join(", ")) }
    )]
    UnknownOrphans {
        /// The names that matched nothing.
        names: Vec<String>,
        /// The orphans' names.
        available: Vec<String>,
    },
    /// `orphans delete` without a terminal to confirm on, and without `--yes`.
    #[error(
        "refusing to change the cluster without confirmation: not running on a terminal; pass \
         --yes to go ahead, or --dry-run to only preview"
    )]
    NeedsConfirmation,
    /// The confirmation prompt failed.
    #[error("asking for confirmation: {0}")]
    Prompt(io::Error),
    /// Some changes of `orphans delete` failed.
    #[error(
        "{failed} of {total} changes failed (see the errors above); run `kubectl karpenter \
         orphans` to see what is left"
    )]
    Incomplete {
        /// Failed steps.
        failed: usize,
        /// Steps tried or skipped.
        total: usize,
    },
    /// `drift explain NAME` named no NodeClaim.
    #[error(transparent)]
    Resolve(#[from] crate::drift::resolve::ResolveError),
    /// An `upgrade` command failed (no target, no such NodePool, a patch failed).
    #[error(transparent)]
    Upgrade(#[from] crate::upgrade::UpgradeError),
    /// Writing output failed.
    #[error(transparent)]
    Output(#[from] OutputError),
}

/// How a command that ran to the end came out (exit codes 0 and 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing to report (exit 0).
    Clean,
    /// Problems found, e.g. orphans (exit 1).
    Found,
}

/// A client for the cluster the global flags select, and how to name it in errors.
pub struct Connection {
    /// The client.
    pub client: kube::Client,
    /// API server URL.
    pub server: String,
    /// kubeconfig context.
    pub context: String,
    /// kubeconfig cluster entry, when known (an EKS cluster ARN on EKS).
    pub cluster: Option<String>,
}

impl Connection {
    /// Loads the kubeconfig and builds the client.
    ///
    /// Errors: [`Error::Kubeconfig`], [`Error::Client`].
    pub async fn open(global: &GlobalArgs) -> Result<Connection, Error> {
        let Loaded {
            config,
            context,
            cluster,
        } = kubeconfig::load(&global.selection()).await?;
        let server = config
            .cluster_url
            .to_string()
            .trim_end_matches('/')
            .to_owned();
        let client = kube::Client::try_from(config).map_err(|source| Error::Client {
            context: context.clone(),
            source,
        })?;
        Ok(Connection {
            client,
            server,
            context,
            cluster,
        })
    }

    /// Lists NodeClaims matching `params`.
    ///
    /// Errors: [`Error::NotInstalled`] when the server does not serve them, else [`Error::List`].
    pub async fn nodeclaims(&self, params: &ListParams) -> Result<Vec<NodeClaim>, Error> {
        let api: Api<NodeClaim> = Api::all(self.client.clone());
        match api.list(params).await {
            Ok(list) => Ok(list.items),
            Err(kube::Error::Api(status)) if status.code == 404 => Err(Error::NotInstalled {
                server: self.server.clone(),
                context: self.context.clone(),
            }),
            Err(source) => Err(Error::List {
                server: self.server.clone(),
                context: self.context.clone(),
                source,
            }),
        }
    }

    /// [`Error::ListOther`] for `what`.
    pub fn list_error(&self, what: &'static str, source: kube::Error) -> Error {
        Error::ListOther {
            what,
            server: self.server.clone(),
            context: self.context.clone(),
            source: Box::new(source),
        }
    }
}

/// An error and its causes, `outer: inner: …`, skipping causes the outer text already repeats.
pub fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Output(OutputError::Io(e))
    }
}

impl Error {
    /// Whether the failure is only that the reader of stdout went away (`| head`): not an error.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, Error::Output(OutputError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// Where output goes and how the terminal looks.
pub struct Io<'a, O: Write, E: Write> {
    /// Data (tables, lists).
    pub out: &'a mut O,
    /// Notes such as "No resources found".
    pub err: &'a mut E,
    /// Whether tables may be coloured (decided from `--color`, the TTY and `NO_COLOR`).
    pub color: bool,
}

/// Runs the command; `prompt` asks for confirmations (`orphans delete`).
///
/// Errors: see [`Error`].
pub async fn run<O: Write, E: Write>(
    cli: Cli,
    io: Io<'_, O, E>,
    prompt: &mut dyn Prompt,
) -> Result<Outcome, Error> {
    match &cli.command {
        Command::Version => {
            writeln!(io.out, "kubectl-karpenter {}", env!("CARGO_PKG_VERSION"))?;
            Ok(Outcome::Clean)
        }
        Command::Status(args) => {
            let claims = list_nodeclaims(&cli, args).await?;
            let prices: Box<dyn PriceBook> = match CatalogPrices::embedded() {
                Ok(p) => Box::new(p),
                Err(e) => {
                    writeln!(io.err, "warning: prices unavailable: {e}")?;
                    Box::new(NoPrices)
                }
            };
            write_status(args, &claims, Timestamp::now(), prices.as_ref(), io)?;
            Ok(Outcome::Clean)
        }
        Command::Orphans(args) => match &args.action {
            Some(OrphansAction::Delete(delete)) => {
                orphans::delete(&cli.global, delete, io, prompt).await
            }
            _ => orphans::list(&cli.global, args.list_args(), io).await,
        },
        Command::Drift(args) => match &args.action {
            DriftAction::Explain(explain) => {
                crate::drift::command::explain(&cli.global, explain, io).await
            }
        },
        Command::Upgrade(args) => crate::upgrade::command::run(&cli.global, args, io).await,
    }
}

async fn list_nodeclaims(cli: &Cli, args: &StatusArgs) -> Result<Vec<NodeClaim>, Error> {
    let conn = Connection::open(&cli.global).await?;
    let mut params = ListParams::default();
    if let Some(pool) = &args.nodepool {
        params = params.labels(&format!("{}={pool}", crds::labels::NODEPOOL_LABEL));
    }
    let claims = conn.nodeclaims(&params).await?;
    Ok(status::filter_nodepool(claims, args.nodepool.as_deref()))
}

/// Renders `claims` as `args` asks (pure apart from writing to `io`).
///
/// Errors: writing or serializing failed.
pub fn write_status<O: Write, E: Write>(
    args: &StatusArgs,
    claims: &[NodeClaim],
    now: Timestamp,
    prices: &dyn PriceBook,
    io: Io<'_, O, E>,
) -> Result<(), Error> {
    let table = matches!(args.output, OutputFormat::Table | OutputFormat::Wide);
    if claims.is_empty() && (table || args.output == OutputFormat::Name) {
        writeln!(io.err, "No resources found")?;
        return Ok(());
    }
    match args.output {
        OutputFormat::Table | OutputFormat::Wide => {
            let rows = status::build_rows(claims, now, prices);
            let opts = TableOptions {
                wide: args.output == OutputFormat::Wide,
                headers: !args.no_headers,
                color: io.color,
            };
            render::write_table(io.out, &rows, opts)?;
        }
        OutputFormat::Json => output::write_json(io.out, &sorted(claims))?,
        OutputFormat::Yaml => output::write_yaml(io.out, &sorted(claims))?,
        OutputFormat::Name => output::write_names(io.out, &sorted(claims))?,
    }
    io.out.flush()?;
    Ok(())
}

/// NodeClaims in the table's order (NodePool, then name).
fn sorted(claims: &[NodeClaim]) -> Vec<NodeClaim> {
    let pool = |c: &NodeClaim| {
        c.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crds::labels::NODEPOOL_LABEL))
            .cloned()
    };
    let mut sorted = claims.to_vec();
    sorted.sort_by_cached_key(|c| {
        let p = pool(c);
        (p.is_none(), p, c.metadata.name.clone())
    });
    sorted
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures;

    fn status(output: OutputFormat) -> StatusArgs {
        StatusArgs {
            output,
            nodepool: None,
            no_headers: false,
        }
    }

    fn render(args: &StatusArgs, claims: &[NodeClaim]) -> (String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let io = Io {
            out: &mut out,
            err: &mut err,
            color: false,
        };
        write_status(args, claims, fixtures::now(), &fixtures::FixedPrices, io).expect("render");
        (
            String::from_utf8(out).expect("utf-8"),
            String::from_utf8(err).expect("utf-8"),
        )
    }

    #[test]
    fn empty_table_says_no_resources_on_stderr() {
        for format in [OutputFormat::Table, OutputFormat::Wide, OutputFormat::Name] {
            let (out, err) = render(&status(format), &[]);
            assert_eq!(out, "");
            assert_eq!(err, "No resources found\n");
        }
        let (out, err) = render(&status(OutputFormat::Json), &[]);
        assert!(out.contains("\"kind\": \"List\""), "{out}");
        assert_eq!(err, "");
    }

    #[test]
    fn lists_follow_the_table_order() {
        let (out, _) = render(&status(OutputFormat::Name), &fixtures::sample());
        let names: Vec<&str> = out.lines().collect();
        assert_eq!(
            names,
            vec![
                "nodeclaim.karpenter.sh/default-abcde",
                "nodeclaim.karpenter.sh/default-fghij",
                "nodeclaim.karpenter.sh/default-klmno",
                "nodeclaim.karpenter.sh/gpu-pqrst",
                "nodeclaim.karpenter.sh/gpu-uvwxy",
                "nodeclaim.karpenter.sh/stray",
            ]
        );
        let (out, _) = render(&status(OutputFormat::Yaml), &fixtures::sample());
        assert!(
            out.starts_with("apiVersion: v1\nitems:\n- apiVersion: karpenter.sh/v1\n"),
            "{out}"
        );
    }

    #[test]
    fn broken_pipe_is_recognised() {
        let e = Error::from(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(e.is_broken_pipe());
        let e = Error::from(io::Error::from(io::ErrorKind::PermissionDenied));
        assert!(!e.is_broken_pipe());
    }
}

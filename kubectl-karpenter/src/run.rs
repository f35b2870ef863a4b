//! Runs a parsed command: `version` and `completion` print here; `status`, `orphans`,
//! `drift explain`, `upgrade`, `history`, `why-pending` and `disruption` run through their own
//! `command` modules, which
//! share the connection, output handles and error type of [`crate::session`]. This module is the
//! top of the plugin's command code: it depends on every command, and none depends on it.

use std::io::Write;

use crate::cli::{Cli, Command, DriftAction, OrphansAction};
use crate::orphans::command::{self as orphans, Prompt};
use crate::session::{Error, Io, Outcome};

/// Runs the command; `prompt` asks for confirmations (`orphans delete`).
///
/// Errors: see [`Error`].
pub async fn run<O: Write, E: Write>(
    cli: Cli,
    io: Io<'_, O, E>,
    prompt: &mut dyn Prompt,
) -> Result<Outcome, Error> {
    match &cli.command {
        Command::Version(args) => {
            crate::version::write(&crate::version::VersionInfo::current(), args.output, io.out)?;
            Ok(Outcome::Clean)
        }
        Command::Completion(args) => {
            crate::completion::write_script(args.shell, io.out)?;
            Ok(Outcome::Clean)
        }
        Command::Status(args) => crate::status::command::run(&cli.global, args, io).await,
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
        Command::History(args) => crate::history::command::run(&cli.global, args, io).await,
        Command::WhyPending(args) => crate::why_pending::command::run(&cli.global, args, io).await,
        Command::Disruption(args) => crate::disruption::command::run(&cli.global, args, io).await,
    }
}

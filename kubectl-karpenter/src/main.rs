//! `kubectl karpenter`: a kubectl plugin that shows Karpenter's NodeClaims (in flight, ready,
//! terminating), what they cost, why they are drifted, how drifted nodes are being upgraded
//! (and pauses, resumes or steps that rollout), what it removed and why, and orphans. Parses
//! the command line, runs it, and maps the outcome to exit codes: 0 nothing found, 1 problems
//! found, 2 failure.
//! Started as `kubectl_complete-karpenter` or with `__complete`, it answers kubectl's plugin
//! completion instead.

mod age;
mod causes;
mod cli;
mod cluster_names;
mod completion;
mod completion_scope;
mod decode;
mod disruption;
mod drift;
#[cfg(test)]
mod fixtures;
mod global_args;
mod history;
mod kubeconfig;
mod kubeconfig_names;
mod orphans;
mod output;
mod price;
mod render;
mod request_timeout;
mod run;
mod session;
mod status;
mod upgrade;
mod version;
mod why_pending;

use std::io::{self, IsTerminal, Write};
use std::process::ExitCode;

/// Exit code for any failure (usage errors included), as kubectl plugins use for errors.
const EXIT_ERROR: u8 = 2;
/// Exit code when the command found problems (e.g. orphans).
const EXIT_FOUND: u8 = 1;

fn main() -> ExitCode {
    let args: Vec<_> = std::env::args_os().collect();
    // kubectl's plugin completion (`kubectl_complete-karpenter`, or `__complete` by hand).
    if let Some(words) = completion::request(&args) {
        return match completion::write_candidates(&words, &mut io::stdout().lock()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                let _ = writeln!(io::stderr(), "error: completing {words:?}: {e}");
                ExitCode::from(EXIT_ERROR)
            }
        };
    }
    let cli = match cli::parse_from(args) {
        Ok(cli) => cli,
        // --help and --version exit 0; usage errors exit 2.
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_ERROR)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let no_color = std::env::var("NO_COLOR").ok();
    let color = cli
        .global
        .color
        .enabled(io::stdout().is_terminal(), no_color.as_deref());
    // The decision above already honours NO_COLOR; tell crossterm so it does not decide again.
    crossterm::style::force_color_output(color);

    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let (mut out, mut err) = (io::stdout().lock(), io::stderr());
    let streams = session::Io {
        out: &mut out,
        err: &mut err,
        color,
    };
    let mut prompt = orphans::command::TerminalPrompt;
    match runtime.block_on(run::run(cli, streams, &mut prompt)) {
        Ok(session::Outcome::Clean) => ExitCode::SUCCESS,
        Ok(session::Outcome::Found) => ExitCode::from(EXIT_FOUND),
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(io::stderr(), "error: {e}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

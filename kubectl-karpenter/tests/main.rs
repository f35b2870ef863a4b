//! The plugin's integration tests: the built `kubectl-karpenter` run through real kubectl
//! against sandboxes.
//!
//! One test binary per package (each links the whole controller and sandbox, about 150 MB in a
//! debug build), so CI's disk holds one copy instead of one per file. Run one file's tests
//! with its module path, e.g. `cargo test -p kubectl-karpenter --test integration cli::`.

mod cli;
mod disruption;
mod drift;
mod history;
#[cfg(unix)]
mod krew;
mod orphans;
#[cfg(feature = "aws")]
mod orphans_ec2;
mod status;
mod support;
mod upgrade;
mod why_pending;

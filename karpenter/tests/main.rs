//! The `karpenter` binary's integration tests: `run`, `sandbox` and `simulate` through the
//! command line, and the AWS provider against moto.
//!
//! One test binary per package (each links the whole controller and sandbox, about 150 MB in a
//! debug build), so CI's disk holds one copy instead of one per file. Run one file's tests
//! with its module path, e.g. `cargo test -p karpenter --test integration run_cli::`.

#[cfg(feature = "aws")]
mod ami_alias_moto;
#[cfg(feature = "aws")]
mod aws_moto;
mod common;
#[cfg(feature = "aws")]
mod failover_moto;
#[cfg(feature = "aws")]
mod interruption_moto;
#[cfg(feature = "aws")]
mod launch_template_moto;
mod leader_election;
#[cfg(feature = "aws")]
mod moto_cloud;
#[cfg(feature = "aws")]
mod reservations_moto;
mod run_cli;
#[cfg(unix)]
mod sandbox_auth;
mod sandbox_cli;
mod sandbox_interrupt;
mod sandbox_publish_ami;
mod simulate_cli;
mod workload_cli;

//! The sandbox API server's integration tests: kube-rs and real kubectl against it.
//!
//! One test binary per package (each links the whole controller and sandbox, about 150 MB in a
//! debug build), so CI's disk holds one copy instead of one per file. Run one file's tests
//! with its module path, e.g. `cargo test -p sandbox --test integration api::`.

mod api;
mod authn;
mod connections;
mod faults;
mod kubectl_pagination;
mod kubectl_validation;
mod read_params;
mod support;

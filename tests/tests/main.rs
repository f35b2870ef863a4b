//! End-to-end tests: the sandbox, the controller and the plugin driven through real kubectl.
//!
//! One test binary per package (each links the whole controller and sandbox, about 150 MB in a
//! debug build), so CI's disk holds one copy instead of one per file. Run one file's tests
//! with its module path, e.g. `cargo test -p tests --test integration ami_release::`.

mod ami_release;
mod architecture;
mod capacity_reservations;
mod consolidation;
mod crash_safety;
mod dashboards;
mod deploy;
mod disruption_marks;
mod doc_links;
mod drift;
mod faults;
mod helm;
mod interruption;
mod interruption_queue;
mod kubectl;
mod kubectl_describe;
mod leader_election;
mod lifecycle;
mod metrics;
mod min_values_policy;
mod node_overlay;
mod orphans;
mod parallel_creates;
mod provisioning;
mod repair;
mod static_capacity;
mod upgrade;
mod volumes;

//! The sandbox: an in-memory Kubernetes API server on loopback that real kubectl and kube-rs
//! clients use, plus simulated cluster actors (kube-scheduler, kubelet, workload controllers).

pub mod admission;
pub mod error;
pub mod patch;
pub mod registry;
pub mod selector;
pub mod store;
pub mod table;
pub mod pods;
pub mod server;
pub mod runtime;

pub use runtime::Sandbox;
pub use store::Store;
pub mod actors;

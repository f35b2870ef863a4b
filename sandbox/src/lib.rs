//! The sandbox: an in-memory Kubernetes API server on loopback that real kubectl and kube-rs
//! clients use, plus simulated cluster actors (kubelet, workload controllers, CSI driver). Its
//! kube-scheduler is built on Karpenter's scheduling core and lives in the `karpenter` crate
//! (`karpenter::sandbox::kube_scheduler`), which runs it against this store.

pub mod admission;
pub mod audit;
pub mod cel;
pub mod decode;
pub mod defaults;
pub mod error;
pub mod events;
pub mod faults;
pub mod patch;
pub mod pods;
pub mod quantity;
pub mod registry;
pub mod runtime;
pub mod schema;
pub mod selector;
pub mod server;
pub mod store;
pub mod table;
pub mod validation;

pub use runtime::Sandbox;
pub use store::Store;
pub mod actors;

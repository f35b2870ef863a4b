//! Table tests of the simulated kube-scheduler, derived from the Kubernetes scheduler plugin tests.

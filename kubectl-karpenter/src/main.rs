//! kubectl-karpenter
fn main() {}

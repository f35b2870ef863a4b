//! Table tests of topology spread and pod (anti-)affinity in the provisioning solver.

//! What the catalog ([`super::catalog`]) and the price tables ([`super::prices`]) built from the
//! embedded EC2 data (`data/ec2/`) share: the default region and the error of a malformed file.

/// The default region: the one [`super::catalog::Catalog::embedded`] describes and the sandbox
/// runs in.
pub const REGION: &str = "us-east-1";

/// Why the embedded data could not be read (a build defect, reported rather than panicking).
#[derive(Debug, thiserror::Error)]
#[error("embedded EC2 data {file}: {message}")]
pub struct CatalogError {
    /// The embedded CSV (under `data/ec2/`), e.g. `ec2-on-demand-prices.csv`.
    pub file: &'static str,
    /// The CSV reader's error (record and field).
    pub message: String,
}

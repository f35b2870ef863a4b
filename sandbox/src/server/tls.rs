//! TLS for the sandbox API server, as kube-apiserver serves it: a certificate authority made
//! for each sandbox, a serving certificate it signs for `127.0.0.1` and `localhost`, and the
//! CA's certificate in the kubeconfig so kubectl and kube-rs verify whom they talk to. Without
//! it the bearer token would be useless: client-go (kubectl) sends a kubeconfig's credentials
//! only over https. Keys live in memory only and die with the server. Handshakes run per
//! connection, within [`super::Limits::handshake_timeout`] (`conn.rs`).

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio_rustls::TlsAcceptor;

/// Why the sandbox cannot serve TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A key or certificate could not be made.
    #[error("making the sandbox's certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    /// rustls refused the certificate or key.
    #[error("configuring TLS: {0}")]
    Config(#[from] rustls::Error),
}

/// The certificates of one sandbox API server: its own CA (`CN=karpenter-sandbox-ca`) and a
/// serving certificate the CA signed for `127.0.0.1` and `localhost` (ECDSA P-256, valid from
/// 1975 to 4096 as rcgen makes them: the CA's key is gone when the process ends, so no one can
/// sign with it later).
pub struct ServingCert {
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    cert_der: CertificateDer<'static>,
    key_der: PrivatePkcs8KeyDer<'static>,
}

impl ServingCert {
    /// A new CA and serving certificate, with new keys.
    ///
    /// Errors: a key cannot be generated or a certificate cannot be signed (the system's
    /// random source failed).
    pub fn generate() -> Result<ServingCert, TlsError> {
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.distinguished_name
            .push(DnType::CommonName, "karpenter-sandbox-ca");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
        let mut serving = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "karpenter-sandbox");
        serving.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let key = KeyPair::generate()?;
        let cert = serving.signed_by(&key, &ca)?;
        Ok(ServingCert {
            ca_pem: ca.pem(),
            ca_der: ca.der().clone(),
            cert_der: cert.der().clone(),
            key_der: PrivatePkcs8KeyDer::from(key.serialize_der()),
        })
    }

    /// The CA's certificate, PEM-encoded (a kubeconfig's `certificate-authority-data` is its
    /// base64).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The CA's certificate, DER-encoded (kube-rs's `Config::root_cert` takes it).
    pub fn ca_der(&self) -> &[u8] {
        &self.ca_der
    }

    /// A TLS acceptor presenting the serving certificate (TLS 1.2 and 1.3, ring's cipher
    /// suites, HTTP/1.1 by ALPN).
    ///
    /// Errors: rustls refuses the certificate or the key.
    pub(crate) fn acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![self.cert_der.clone()],
                PrivateKeyDer::Pkcs8(self.key_der.clone_key()),
            )?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }
}

//! Authentication of the sandbox API server, as kube-apiserver's bearer-token authenticator
//! does it: every request must carry `Authorization: Bearer <token>` with the token the sandbox
//! generated (and wrote into its kubeconfig), or is answered 401 `Unauthorized`. Only the
//! health and version endpoints (`/healthz`, `/livez`, `/readyz`, `/version`) are open to
//! anonymous requests, as on a kube-apiserver whose anonymous access is limited to them
//! (`AuthenticationConfiguration`'s `anonymous.conditions`, Kubernetes 1.32) and whose
//! `system:public-info-viewer` role grants them. A token that is presented and wrong is refused
//! everywhere, the health endpoints included (kube-apiserver never falls back to anonymous
//! then). Refused requests reach neither the store, the fault injector nor the audit log.

use std::fmt;
use std::sync::Arc;

use rand::RngCore;
use subtle::ConstantTimeEq;

/// Paths an anonymous request (no bearer token) may read.
const PUBLIC_PATHS: [&str; 4] = ["/healthz", "/livez", "/readyz", "/version"];

/// The bearer token one sandbox API server accepts: 64 lowercase hex digits (32 random bytes
/// from the thread-local CSPRNG, seeded by the OS). Its `Debug` form hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct BearerToken(Arc<str>);

impl BearerToken {
    /// A fresh random token.
    pub fn random() -> BearerToken {
        let mut bytes = [0u8; 32];
        rand::rng().fill_bytes(&mut bytes);
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        BearerToken(hex.into())
    }

    /// The token as a client sends it after `Bearer `.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this token, in time independent of where they differ.
    fn matches(&self, presented: &[u8]) -> bool {
        self.0.as_bytes().ct_eq(presented).into()
    }
}

impl fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

/// Who a request is, as far as the API server can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Identity {
    /// It carries the sandbox's token.
    Authenticated,
    /// It carries no bearer token (no `Authorization` header, an empty token, or another
    /// scheme such as `Basic`, which kube-apiserver's token authenticator ignores too).
    Anonymous,
    /// It carries a bearer token that is not the sandbox's.
    InvalidToken,
}

impl Identity {
    /// Identify a request by its `Authorization` header value (raw bytes, if present).
    pub(crate) fn of(authorization: Option<&[u8]>, token: &BearerToken) -> Identity {
        let Some(value) = authorization else {
            return Identity::Anonymous;
        };
        // As k8s.io/apiserver's bearertoken authenticator reads it: trimmed, split on single
        // spaces, a case-insensitive `Bearer` scheme, and the second part as the token.
        let mut parts = value.trim_ascii().splitn(3, |b| *b == b' ');
        let scheme = parts.next().unwrap_or_default();
        let Some(presented) = parts.next() else {
            return Identity::Anonymous;
        };
        if !scheme.eq_ignore_ascii_case(b"bearer") {
            return Identity::Anonymous;
        }
        if presented.is_empty() {
            Identity::Anonymous
        } else if token.matches(presented) {
            Identity::Authenticated
        } else {
            Identity::InvalidToken
        }
    }

    /// Whether a request of this identity may go to `path` (without its trailing `/`).
    pub(crate) fn may_access(self, path: &str) -> bool {
        match self {
            Identity::Authenticated => true,
            Identity::Anonymous => PUBLIC_PATHS.contains(&path),
            Identity::InvalidToken => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{BearerToken, Identity};

    #[test]
    fn tokens_are_64_hex_digits_and_differ_per_sandbox() {
        let a = BearerToken::random();
        let b = BearerToken::random();
        assert_eq!(a.as_str().len(), 64);
        assert!(a.as_str().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert!(
            !format!("{a:?}").contains(a.as_str()),
            "Debug shows the token"
        );
    }

    #[test]
    fn the_authorization_header_decides_who_the_request_is() {
        let token = BearerToken::random();
        let bearer = format!("Bearer {}", token.as_str());
        let lower = format!(" bearer {} trailing", token.as_str());
        let two_spaces = format!("Bearer  {}", token.as_str());
        let other = format!("Bearer {}", BearerToken::random().as_str());
        let prefix = format!("Bearer {}", &token.as_str()[..63]);
        let cases: [(Option<&str>, Identity); 10] = [
            (Some(&bearer), Identity::Authenticated),
            (Some(&lower), Identity::Authenticated),
            (Some(&other), Identity::InvalidToken),
            (Some(&prefix), Identity::InvalidToken),
            (None, Identity::Anonymous),
            (Some(""), Identity::Anonymous),
            (Some("Bearer "), Identity::Anonymous),
            (Some(&two_spaces), Identity::Anonymous),
            (Some("Basic dXNlcjpwYXNz"), Identity::Anonymous),
            (
                Some(&format!("Bearer{}", token.as_str())),
                Identity::Anonymous,
            ),
        ];
        for (header, want) in cases {
            assert_eq!(
                Identity::of(header.map(str::as_bytes), &token),
                want,
                "{header:?}"
            );
        }
    }

    #[test]
    fn anonymous_requests_reach_only_health_and_version() {
        for path in ["/healthz", "/livez", "/readyz", "/version"] {
            assert!(Identity::Anonymous.may_access(path), "{path}");
            assert!(!Identity::InvalidToken.may_access(path), "{path}");
        }
        for path in [
            "",
            "/api",
            "/apis",
            "/openapi/v3",
            "/readyz/ping",
            "/api/v1/namespaces/kube-system/leases",
            "/apis/karpenter.sh/v1/nodeclaims",
        ] {
            assert!(!Identity::Anonymous.may_access(path), "{path}");
            assert!(Identity::Authenticated.may_access(path), "{path}");
        }
    }
}

//! Helpers the integration tests share: requests with the sandbox's token as raw HTTP through
//! kube-rs, and raw TLS connections for what a client library would never send (unfinished
//! headers, stalled bodies).

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, ServerName};
use sandbox::Sandbox;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

/// `method path` with `body` (JSON) and the sandbox's token: the status code and the whole
/// answer (a watch's answer once the watch ends). The first answer counts: kube-rs's retries
/// of 429, 503 and 504 are off.
pub async fn send(sb: &Sandbox, method: &str, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
    let mut config = sb.client_config();
    config.default_retry = false;
    send_with(config, method, path, None, body).await
}

/// `method path` with `body` (JSON) through a client made from `config`, with `authorization`
/// as the `Authorization` header's value when given: the status code and the whole answer.
pub async fn send_with(
    config: kube::Config,
    method: &str,
    path: &str,
    authorization: Option<&str>,
    body: Vec<u8>,
) -> (u16, Vec<u8>) {
    let client = kube::Client::try_from(config).expect("client");
    let mut request = http::Request::builder()
        .method(method)
        .uri(path)
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(value) = authorization {
        request = request.header(http::header::AUTHORIZATION, value);
    }
    let request = request
        .body(kube::client::Body::from(body))
        .expect("a request");
    let response = client.send(request).await.expect("a response");
    let code = response.status().as_u16();
    let body = response
        .into_body()
        .collect_bytes()
        .await
        .expect("the body");
    (code, body.to_vec())
}

/// `GET path` with the sandbox's token: the status code and the answer as JSON.
pub async fn get_json(sb: &Sandbox, path: &str) -> (u16, serde_json::Value) {
    let (code, body) = send(sb, "GET", path, Vec::new()).await;
    let json = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("GET {path}: {code} {e}: {}", String::from_utf8_lossy(&body)));
    (code, json)
}

/// A TCP connection to the sandbox, no TLS yet.
pub async fn tcp(sb: &Sandbox) -> TcpStream {
    TcpStream::connect(sb.addr()).await.expect("connect")
}

/// A TLS connection to the sandbox (its CA trusted), ready for raw HTTP/1.1.
pub async fn tls(sb: &Sandbox) -> TlsStream<TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    for der in sb.client_config().root_cert.unwrap_or_default() {
        roots
            .add(CertificateDer::from(der))
            .expect("the sandbox's CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from("127.0.0.1").expect("an IP name");
    TlsConnector::from(Arc::new(config))
        .connect(name, tcp(sb).await)
        .await
        .expect("TLS handshake")
}

/// Everything the server sends until it closes the connection, or `None` if it is still open
/// after `within`. A reset counts as closed.
pub async fn until_closed<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    within: Duration,
) -> Option<Vec<u8>> {
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 8192];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(within, read).await.ok().map(|()| got)
}

/// An HTTP/1.1 response split into its status code, lowercase headers and body (the body as
/// sent, without undoing a chunked encoding).
pub fn parse_response(raw: &[u8]) -> (u16, String, Vec<u8>) {
    let text = String::from_utf8_lossy(raw);
    let (head, _) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no complete response: {text:?}"));
    let code = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head:?}"));
    (code, head.to_lowercase(), raw[head.len() + 4..].to_vec())
}

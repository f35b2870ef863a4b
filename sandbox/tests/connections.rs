//! What the sandbox API server tolerates of a connection (issue 33, defect 4): a request
//! without the token is answered from its headers, its body never waited for; unfinished TLS
//! handshakes and headers are cut off; connections that have not authenticated are capped; an
//! authenticated body must arrive in time and fit, else a Kubernetes `Status` answers.

use std::time::{Duration, Instant};

use sandbox::server::Limits;
use sandbox::{Sandbox, Store};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::support::{parse_response, send, tcp, tls, until_closed};

const CONFIGMAPS: &str = "/api/v1/namespaces/default/configmaps";

/// Limits short enough for tests to see them act.
fn short() -> Limits {
    Limits {
        handshake_timeout: Duration::from_millis(300),
        header_read_timeout: Duration::from_millis(300),
        body_read_timeout: Duration::from_millis(300),
        ..Limits::default()
    }
}

#[tokio::test]
async fn a_request_without_the_token_is_refused_before_its_body_arrives() {
    let sb = Sandbox::start(0).await.expect("server");
    let mut conn = tls(&sb).await;
    // 1.9 MB announced, 64 KiB sent: the probe that held 100 such bodies in memory.
    let head = format!(
        "POST {CONFIGMAPS} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: 1900000\r\n\r\n",
        sb.addr()
    );
    conn.write_all(head.as_bytes()).await.expect("headers");
    conn.write_all(&vec![b' '; 64 * 1024])
        .await
        .expect("part of a body");
    let started = Instant::now();
    let answer = until_closed(&mut conn, Duration::from_secs(5))
        .await
        .expect("answered and closed without waiting for the body");
    assert!(started.elapsed() < Duration::from_secs(5));
    let (code, head, body) = parse_response(&answer);
    assert_eq!(code, 401, "{head}");
    assert!(head.contains("connection: close"), "{head}");
    let status: Value = serde_json::from_slice(&body).expect("a Status");
    assert_eq!(status["reason"], "Unauthorized");
    assert!(sb.audit().is_empty(), "nothing reached the store");
}

#[tokio::test]
async fn unfinished_handshakes_and_headers_are_cut_off() {
    let sb = Sandbox::start_with_limits(Store::new(), 0, short())
        .await
        .expect("server");
    // Headers that never end.
    let mut conn = tls(&sb).await;
    conn.write_all(b"GET /version HTTP/1.1\r\nHost: x\r\nX-Slow: 1")
        .await
        .expect("half a request");
    let started = Instant::now();
    let answer = until_closed(&mut conn, Duration::from_secs(5))
        .await
        .expect("closed after the header timeout");
    assert!(answer.is_empty(), "no answer: {answer:?}");
    assert!(started.elapsed() >= Duration::from_millis(250));
    // A TCP connection that never starts TLS.
    let mut raw = tcp(&sb).await;
    assert!(
        until_closed(&mut raw, Duration::from_secs(5))
            .await
            .is_some(),
        "closed after the handshake timeout"
    );
    // A client that sends its request in time is answered.
    let (code, _) = send(&sb, "GET", "/version", Vec::new()).await;
    assert_eq!(code, 200);
}

#[tokio::test]
async fn connections_that_have_not_authenticated_are_capped() {
    let limits = Limits {
        max_unauthenticated: 2,
        ..Limits::default()
    };
    let sb = Sandbox::start_with_limits(Store::new(), 0, limits)
        .await
        .expect("server");
    let client = kube::Client::try_from(sb.client_config()).expect("client");
    client.apiserver_version().await.expect("authenticated");
    // Two idle connections fill the cap (the client's authenticated one does not count)...
    let mut first = tcp(&sb).await;
    let mut second = tcp(&sb).await;
    // ...and the next one is closed as it is accepted.
    let mut third = tcp(&sb).await;
    assert!(
        until_closed(&mut third, Duration::from_secs(5))
            .await
            .is_some(),
        "over the cap"
    );
    for held in [&mut first, &mut second] {
        assert!(
            until_closed(held, Duration::from_millis(200))
                .await
                .is_none(),
            "within the cap"
        );
    }
    // The authenticated connection still serves.
    client
        .apiserver_version()
        .await
        .expect("the pooled connection");
    // A place frees when a held connection closes.
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut next = tcp(&sb).await;
        if until_closed(&mut next, Duration::from_millis(100))
            .await
            .is_none()
        {
            break;
        }
        assert!(Instant::now() < deadline, "the place was never freed");
    }
}

#[tokio::test]
async fn an_oversized_body_is_refused_with_a_status() {
    let sb = Sandbox::start(0).await.expect("server");
    // kube-apiserver's limit is 3 MiB; one byte more is refused by its Content-Length alone.
    let limit = 3 * 1024 * 1024;
    let mut conn = tls(&sb).await;
    let head = format!(
        "POST {CONFIGMAPS} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        sb.token(),
        limit + 1
    );
    conn.write_all(head.as_bytes()).await.expect("headers");
    let answer = until_closed(&mut conn, Duration::from_secs(5))
        .await
        .expect("answered and closed");
    let (code, _, body) = parse_response(&answer);
    assert_eq!(code, 413);
    let status: Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("not a Status ({e}): {}", String::from_utf8_lossy(&body)));
    assert_eq!(
        status,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("Request entity too large: limit is {limit}"),
            "reason": "RequestEntityTooLarge", "code": 413})
    );
    // A body under the limit is read.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"},
        "data": {"x": "y".repeat(512 * 1024)}});
    let (code, _) = send(&sb, "POST", CONFIGMAPS, cm.to_string().into_bytes()).await;
    assert_eq!(code, 201);
}

#[tokio::test]
async fn authenticated_bodies_must_arrive_in_time_and_fit_as_they_stream() {
    let limits = Limits {
        max_body_bytes: 1024,
        ..short()
    };
    let sb = Sandbox::start_with_limits(Store::new(), 0, limits)
        .await
        .expect("server");
    let head = |extra: &str| {
        format!(
            "POST {CONFIGMAPS} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\n{extra}\r\n",
            sb.token()
        )
    };
    // A body that stops coming.
    let mut conn = tls(&sb).await;
    conn.write_all(head("Content-Length: 100\r\n").as_bytes())
        .await
        .expect("headers");
    conn.write_all(b"{\"metadata\":").await.expect("a start");
    let answer = until_closed(&mut conn, Duration::from_secs(5))
        .await
        .expect("answered and closed");
    let (code, head_seen, body) = parse_response(&answer);
    assert_eq!(code, 504, "{head_seen}");
    let status: Value = serde_json::from_slice(&body).expect("a Status");
    assert_eq!(status["reason"], "Timeout");
    // A chunked body that grows past the limit, without a Content-Length to refuse it early.
    let mut conn = tls(&sb).await;
    conn.write_all(head("Transfer-Encoding: chunked\r\n").as_bytes())
        .await
        .expect("headers");
    conn.write_all(format!("800\r\n{}\r\n", "x".repeat(0x800)).as_bytes())
        .await
        .expect("a chunk over the limit");
    let answer = until_closed(&mut conn, Duration::from_secs(5))
        .await
        .expect("answered and closed");
    let (code, _, body) = parse_response(&answer);
    assert_eq!(code, 413);
    let status: Value = serde_json::from_slice(&body).expect("a Status");
    assert_eq!(status["message"], "Request entity too large: limit is 1024");
    assert!(
        sb.audit().iter().all(|e| e.status >= 400),
        "nothing written"
    );
}

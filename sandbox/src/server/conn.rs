//! The connections of the sandbox API server and what it tolerates of them, as kube-apiserver's
//! `http.Server` guards itself (k8s.io/apiserver `pkg/server/secure_serving.go`): a TLS
//! handshake and request headers that must arrive in time, idle connections closed, request
//! bodies read only after the request authenticated, in time and up to a size
//! ([`Limits`]). On top of that, a cap on connections that have not authenticated yet: the
//! sandbox's clients all hold its token, so a crowd of connections without one is a probe, and
//! the ones over the cap are closed as they are accepted.
//!
//! Each accepted connection gets a task: the TLS handshake, then hyper's HTTP/1.1 server
//! driving the router. A connection is counted as unauthenticated from its acceptance until a
//! request on it carries the sandbox's token ([`Connection::authenticated`]); a request that
//! does not is answered and the connection closed, so an unauthenticated connection lives at
//! most the handshake, one request's headers and its answer, plus [`LINGER`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio_rustls::TlsAcceptor;

/// What the API server tolerates of its clients, and how long it waits for them. The defaults
/// ([`Limits::default`]) follow kube-apiserver where it has a value and are documented per
/// field; tests shorten them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// A client has this long from its TCP connection to the end of the TLS handshake (10 s).
    pub handshake_timeout: Duration,
    /// A new connection's first request must have sent all its headers this long after the TLS
    /// handshake (10 s; kube-apiserver allows 32 s, `ReadHeaderTimeout`), or the connection is
    /// closed without an answer.
    pub header_read_timeout: Duration,
    /// An authenticated connection may wait this long for its next request, and take this
    /// long to send that request's headers (90 s: kube-apiserver's `IdleTimeout`, which is also
    /// client-go's and hyper's idle pool timeout, so idle clients let go first).
    pub idle_timeout: Duration,
    /// An authenticated request's body must have arrived this long after its headers (30 s),
    /// or the request is answered 504 `Timeout` and the connection closed.
    pub body_read_timeout: Duration,
    /// Largest request body read, in bytes (3 MiB: kube-apiserver's `MaxRequestBodyBytes`);
    /// a longer one is answered 413 `RequestEntityTooLarge`.
    pub max_body_bytes: usize,
    /// At most this many connections may be open that have not authenticated yet (in their
    /// TLS handshake, sending their first request, or answered without the token); a
    /// connection accepted beyond it is closed at once (128).
    pub max_unauthenticated: usize,
    /// A read at a resourceVersion the store has not reached waits this long for it before
    /// answering 504 `Too large resource version` (3 s: k8s.io/apiserver's watch cache
    /// `blockTimeout`).
    pub resource_version_wait: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            body_read_timeout: Duration::from_secs(30),
            max_body_bytes: 3 * 1024 * 1024,
            max_unauthenticated: 128,
            resource_version_wait: Duration::from_secs(3),
        }
    }
}

/// hyper's read buffer per connection, in bytes: request headers larger than this are answered
/// 431 (kubectl's are well under 4 KiB), and a body is read in chunks of at most this size.
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// After the server closes a connection, how long it waits for the client to close its side
/// before letting go: closing a socket with unread data (a body the server refused without
/// reading) resets the connection, which can destroy the answer before the client reads it.
/// Go's net/http waits 500 ms (`rstAvoidanceDelay`), and so does kube-apiserver.
const LINGER: Duration = Duration::from_millis(500);

/// At most this much of what a client still sends is read and discarded while lingering
/// (Go's net/http discards up to 256 KiB of an unread body, `maxPostHandlerReadBytes`).
const LINGER_DISCARD_BYTES: usize = 256 * 1024;

/// Counts the open connections that have not authenticated.
struct Gate {
    open: AtomicUsize,
    max: usize,
}

impl Gate {
    /// A pass for one more unauthenticated connection, unless `max` are open.
    fn admit(self: &Arc<Self>) -> Option<Pass> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()?;
        Some(Pass {
            gate: Arc::clone(self),
            held: AtomicBool::new(true),
        })
    }
}

/// One unauthenticated connection's place under the [`Gate`], given back when the connection
/// authenticates or closes.
struct Pass {
    gate: Arc<Gate>,
    held: AtomicBool,
}

impl Pass {
    fn release(&self) {
        if self.held.swap(false, Ordering::AcqRel) {
            self.gate.open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for Pass {
    fn drop(&mut self) {
        self.release();
    }
}

/// One client connection, as its requests see it (a request extension).
pub(crate) struct Connection {
    pass: Pass,
    /// Notified when the connection's first request has sent its headers.
    started: Notify,
}

impl Connection {
    /// A request on this connection carried the sandbox's token: the connection no longer
    /// counts against [`Limits::max_unauthenticated`].
    pub(crate) fn authenticated(&self) {
        self.pass.release();
    }
}

/// Accept connections on `tcp` until the returned future is dropped, serving `app` over TLS
/// with `acceptor` within `limits`. Connections still open when it is dropped are closed
/// (watches included).
pub(crate) fn accept_loop(
    tcp: TcpListener,
    acceptor: TlsAcceptor,
    app: Router,
    limits: Limits,
) -> impl Future<Output = ()> + Send {
    let gate = Arc::new(Gate {
        open: AtomicUsize::new(0),
        max: limits.max_unauthenticated,
    });
    let limits = Arc::new(limits);
    async move {
        // Connection tasks end when this sender is dropped with the loop.
        let (stop, stopped) = watch::channel(());
        let _stop = stop;
        loop {
            let (stream, peer) = match tcp.accept().await {
                Ok(accepted) => accepted,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
                    ) =>
                {
                    continue;
                }
                // E.g. out of file descriptors: wait for some to close, as axum does.
                Err(e) => {
                    tracing::error!(error = %e, "sandbox API server cannot accept");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let Some(pass) = gate.admit() else {
                tracing::warn!(
                    %peer,
                    limit = gate.max,
                    "closing a connection: too many connections have not authenticated"
                );
                drop(stream);
                continue;
            };
            let connection = Arc::new(Connection {
                pass,
                started: Notify::new(),
            });
            let served = serve_connection(
                stream,
                peer,
                acceptor.clone(),
                app.clone(),
                Arc::clone(&limits),
                connection,
            );
            let mut stopped = stopped.clone();
            tokio::spawn(async move {
                tokio::select! {
                    () = served => {}
                    _ = stopped.changed() => {}
                }
            });
        }
    }
}

/// One connection: the TLS handshake, then HTTP/1.1 until the client or a timeout closes it.
async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    acceptor: TlsAcceptor,
    app: Router,
    limits: Arc<Limits>,
    connection: Arc<Connection>,
) {
    let tls = match tokio::time::timeout(limits.handshake_timeout, acceptor.accept(stream)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake timed out");
            return;
        }
    };
    let router = TowerToHyperService::new(app);
    let this = Arc::clone(&connection);
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        this.started.notify_one();
        request.extensions_mut().insert(Arc::clone(&this));
        Box::pin(hyper::service::Service::call(&router, request))
    });
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        // hyper starts this clock when it waits for a request head, so it bounds both the idle
        // wait between requests and the headers of each later request.
        .header_read_timeout(limits.idle_timeout)
        .max_buf_size(READ_BUFFER_BYTES)
        .serve_connection(TokioIo::new(tls), service)
        .without_shutdown();
    // The first request's headers are due sooner than hyper's clock says.
    let first_headers = async {
        if tokio::time::timeout(limits.header_read_timeout, connection.started.notified())
            .await
            .is_err()
        {
            return;
        }
        std::future::pending::<()>().await;
    };
    tokio::select! {
        result = served => match result {
            Ok(parts) => linger(parts.io.into_inner()).await,
            Err(e) => tracing::debug!(%peer, error = %e, "connection closed"),
        },
        () = first_headers => {
            tracing::debug!(%peer, "closing a connection: no request headers in time");
        }
    }
}

/// Close the server's side of `tls` (TLS `close_notify`, then TCP FIN) and give the client
/// [`LINGER`] to read the answer and close its side, discarding what it still sends (at most
/// [`LINGER_DISCARD_BYTES`]).
async fn linger(mut tls: tokio_rustls::server::TlsStream<TcpStream>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // Bounded as a whole: a client that reads nothing could stall even the `close_notify`.
    let close = async {
        if tls.shutdown().await.is_err() {
            return;
        }
        let mut buf = [0u8; 16 * 1024];
        let mut discarded = 0;
        while discarded < LINGER_DISCARD_BYTES {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => discarded += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, close).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gate_admits_up_to_its_cap_and_frees_places_on_authentication_or_close() {
        let gate = Arc::new(Gate {
            open: AtomicUsize::new(0),
            max: 2,
        });
        let a = gate.admit().expect("first");
        let b = gate.admit().expect("second");
        assert!(gate.admit().is_none(), "a third is over the cap");
        a.release();
        a.release();
        assert_eq!(gate.open.load(Ordering::Acquire), 1, "released once only");
        let c = gate.admit().expect("a place freed by authentication");
        drop(a);
        assert!(
            gate.admit().is_none(),
            "an authenticated pass frees nothing twice"
        );
        drop(b);
        let _d = gate.admit().expect("a place freed by a close");
        drop(c);
        assert_eq!(gate.open.load(Ordering::Acquire), 1);
    }
}

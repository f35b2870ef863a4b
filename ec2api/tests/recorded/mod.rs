//! A loopback HTTP endpoint that plays back recorded AWS API responses, in order, and keeps
//! every request it was sent: the recorded-response tests run the real SDK client and
//! deserializer against it (moto serves neither DescribeCapacityReservations nor the Pricing
//! API, and the SDK's own replay client needs its `test-util` feature, which turns on
//! serde_json's `preserve_order` for the whole workspace's test build).

// Each test binary that includes this module uses only part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

/// One request as received: its headers (names lower-cased) and body.
#[derive(Clone, Debug)]
pub struct Request {
    /// Header name (lower case) to value, e.g. `x-amz-target`.
    pub headers: BTreeMap<String, String>,
    /// The body, as text.
    pub body: String,
}

/// The endpoint: its URL and what it was sent.
pub struct Server {
    /// `http://127.0.0.1:PORT`, for the SDK's endpoint URL.
    pub url: String,
    requests: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    /// Listen on a loopback port and answer each request with the next `(status, body)` of
    /// `responses` as `content_type`; once they are used up, with a 500.
    pub async fn start(responses: Vec<(u16, String)>, content_type: &'static str) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        let responses = Arc::new(Mutex::new(responses.into_iter()));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (seen, responses) = (Arc::clone(&seen), Arc::clone(&responses));
                tokio::spawn(async move {
                    let (read, mut write) = stream.into_split();
                    let mut read = BufReader::new(read);
                    loop {
                        let mut headers = BTreeMap::new();
                        let mut line = String::new();
                        loop {
                            line.clear();
                            if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            if line == "\r\n" {
                                break;
                            }
                            if let Some((name, value)) = line.split_once(':') {
                                headers.insert(
                                    name.trim().to_ascii_lowercase(),
                                    value.trim().to_string(),
                                );
                            }
                        }
                        let length = headers
                            .get("content-length")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0usize);
                        let mut body = vec![0u8; length];
                        if read.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        seen.lock().expect("requests").push(Request {
                            headers,
                            body: String::from_utf8_lossy(&body).into_owned(),
                        });
                        let next = responses.lock().expect("responses").next();
                        let (status, text) = next.unwrap_or((500, "no more responses".into()));
                        let head = format!(
                            "HTTP/1.1 {status} Recorded\r\ncontent-type: {content_type}\r\n\
                             content-length: {}\r\n\r\n",
                            text.len()
                        );
                        if write.write_all(head.as_bytes()).await.is_err()
                            || write.write_all(text.as_bytes()).await.is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        Server { url, requests }
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().expect("requests").clone()
    }

    /// The body of every request received so far, in order.
    pub fn bodies(&self) -> Vec<String> {
        self.requests().into_iter().map(|r| r.body).collect()
    }
}

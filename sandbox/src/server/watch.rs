//! Watch streams: chunked `{"type","object"}` lines from a resourceVersion on, with selector
//! transitions (an object that stops matching is reported DELETED), bookmarks, streaming lists
//! (`sendInitialEvents`) and 410 Expired for versions older than the history. A watch the fault
//! injector picked ([`crate::faults::FaultKind::DropWatch`]) breaks off mid-stream, as a dropped
//! connection does.
//!
//! A version the store has not reached is treated as k8s.io/apiserver's watch cache treats
//! it (`Cacher.Watch`): a plain watch from it is accepted and sends only changes after it; a
//! streaming list (`sendInitialEvents=true`) first waits for the store to reach it and, if it
//! does not in time, sends one ERROR event carrying the 504 `Too large resource version`.
//! `timeoutSeconds` is k8s.io/apiserver's: 0 or absent is the default length, a negative
//! value ends the watch at once.

use std::collections::VecDeque;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::Response;
use kube::core::Selector;
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio::time::Instant;

use super::params::{self, ReadOptions};
use super::{Request, Target};
use crate::error::{ApiError, ApiResult, Reason};
use crate::registry::ResourceType;
use crate::selector::{FieldSelector, labels_match};
use crate::store::{EventType, Store, WatchEvent};
use crate::table::{Columns, IncludeObject, render};

/// Default watch duration when the client sets no `timeoutSeconds` or 0 (kube-apiserver uses
/// 30-60m).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// How long a quiet watch waits before sending a bookmark (when bookmarks are allowed).
const BOOKMARK_EVERY: Duration = Duration::from_secs(5);

struct Filter {
    namespace: Option<String>,
    labels: Selector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        labels_match(&self.labels, obj) && self.fields.matches(obj)
    }

    /// Whether the watch selects by labels or fields (only then are events decoded to filter).
    fn selects(&self) -> bool {
        !self.labels.selects_all() || !self.fields.0.is_empty()
    }

    /// Whether an encoded object matches; undecodable bytes (never written) match nothing.
    fn matches_encoded(&self, json: &[u8]) -> bool {
        serde_json::from_slice::<Value>(json).is_ok_and(|obj| self.matches(&obj))
    }

    /// The event this watcher sees, if any: selector watches turn objects that start or stop
    /// matching into ADDED and DELETED.
    fn translate(&self, ev: &WatchEvent) -> Option<EventType> {
        if self
            .namespace
            .as_deref()
            .is_some_and(|ns| ns != ev.namespace)
        {
            return None;
        }
        if !self.selects() {
            return Some(ev.event_type);
        }
        let now = self.matches_encoded(&ev.object);
        let before = || {
            ev.previous
                .as_deref()
                .is_some_and(|p| self.matches_encoded(p))
        };
        match ev.event_type {
            EventType::Added => now.then_some(EventType::Added),
            EventType::Modified => match (before(), now) {
                (true, true) => Some(EventType::Modified),
                (false, true) => Some(EventType::Added),
                (true, false) => Some(EventType::Deleted),
                (false, false) => None,
            },
            // A deleted object's last state is its state before the deletion.
            EventType::Deleted => now.then_some(EventType::Deleted),
        }
    }
}

/// What each line carries: the object, or a one-row Table of it.
enum Render {
    Object,
    Table { include: IncludeObject, first: bool },
}

struct Stream {
    rt: ResourceType,
    /// The store's clock: a Table row's ages are as of when it is sent.
    clock: crate::store::Now,
    filter: Filter,
    backlog: VecDeque<Arc<WatchEvent>>,
    live: broadcast::Receiver<Arc<WatchEvent>>,
    deadline: Instant,
    bookmarks: bool,
    /// After the backlog of a streaming list, one bookmark marks the end of initial events.
    initial_events_end: Option<u64>,
    last_rv: u64,
    /// The resourceVersion the watch started from: later changes only are sent, and bookmarks
    /// only once the store has reached it (a watch may start from a version not reached yet).
    from_rv: u64,
    render: Render,
    /// When an injected fault breaks the stream off (the connection drops without the clean end
    /// of a timed-out watch).
    drop_at: Option<Instant>,
}

/// What the next step of a watch stream is.
enum Step {
    /// A line to send: one `{"type","object"}` event (or bookmark), as JSON or a Table row.
    Line(Bytes),
    /// The watch ended normally (timeout, lagging client).
    End,
    /// The stream breaks off (injected fault).
    Drop,
}

impl Stream {
    fn line(&mut self, event_type: &str, object: Value) -> Bytes {
        let object = match &mut self.render {
            Render::Table { include, first }
                if event_type != "BOOKMARK" && event_type != "ERROR" =>
            {
                let columns = match &self.rt.printer_columns {
                    Some(cols) => Columns::Custom(cols),
                    None => Columns::BuiltIn {
                        group: &self.rt.group,
                        kind: &self.rt.kind,
                    },
                };
                let mut table = render(&columns, &[&object], *include, json!({}), (self.clock)());
                if !*first {
                    table["columnDefinitions"] = json!([]);
                }
                *first = false;
                table
            }
            _ => object,
        };
        let mut bytes =
            serde_json::to_vec(&json!({"type": event_type, "object": object})).unwrap_or_default();
        bytes.push(b'\n');
        Bytes::from(bytes)
    }

    fn bookmark(&mut self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj =
            json!({"kind": self.rt.kind, "apiVersion": self.rt.api_version(), "metadata": meta});
        self.line("BOOKMARK", obj)
    }

    fn event(&mut self, ev: &WatchEvent) -> Option<Bytes> {
        let et = self.filter.translate(ev)?;
        if let Render::Object = self.render {
            // The event's encoding goes out as it is: no decoding, no copy per watcher.
            return Some(object_line(et.as_str(), &ev.object));
        }
        Some(self.line(et.as_str(), ev.decoded()))
    }

    async fn next(&mut self) -> Step {
        loop {
            if self.drop_at.is_some_and(|at| at <= Instant::now()) {
                return Step::Drop;
            }
            if self.deadline <= Instant::now() {
                return Step::End;
            }
            if let Some(ev) = self.backlog.pop_front() {
                if let Some(line) = self.event(&ev) {
                    return Step::Line(line);
                }
                continue;
            }
            if let Some(rv) = self.initial_events_end.take() {
                return Step::Line(self.bookmark(rv, true));
            }
            let wait = tokio::time::timeout(BOOKMARK_EVERY, self.live.recv());
            let drop_at = self.drop_at.unwrap_or(self.deadline);
            tokio::select! {
                _ = tokio::time::sleep_until(self.deadline) => return Step::End,
                _ = tokio::time::sleep_until(drop_at), if self.drop_at.is_some() => return Step::Drop,
                received = wait => match received {
                    Err(_quiet) => {
                        if self.bookmarks && self.last_rv >= self.from_rv {
                            let rv = self.last_rv;
                            return Step::Line(self.bookmark(rv, false));
                        }
                    }
                    Ok(Ok(ev)) => {
                        self.last_rv = ev.rv;
                        if ev.key != self.rt.key() || ev.rv <= self.from_rv {
                            continue;
                        }
                        if let Some(line) = self.event(&ev) {
                            return Step::Line(line);
                        }
                    }
                    // A client too slow for the live stream reconnects from its last version.
                    Ok(Err(_lagged_or_closed)) => return Step::End,
                },
            }
        }
    }
}

/// Answer a watch request.
///
/// Errors: 400 for parameters or selectors that do not parse or a field the kind cannot be
/// selected by, 422 for forbidden parameter combinations ([`ReadOptions::of`]). A version
/// older than the history (410) or not reached in time by a streaming list (504) is an ERROR
/// event on a 200 stream, as kube-apiserver reports errors found after the watch began.
pub(crate) async fn handle(store: &Arc<Store>, t: &Target, req: &Request) -> ApiResult<Response> {
    let opts = ReadOptions::of(req, true)?;
    let (labels, fields) = params::selectors(&t.rt, req)?;
    let filter = Filter {
        namespace: t.namespace.clone(),
        labels,
        fields,
    };
    let streaming_list = opts.send_initial_events == Some(true);
    let from = opts.resource_version;
    let timeout = match opts.timeout_seconds {
        None | Some(0) => DEFAULT_TIMEOUT,
        Some(n) => Duration::from_secs(u64::try_from(n).unwrap_or(0)),
    };
    if streaming_list
        && let Some(rv) = opts.minimum()
        && let Err(e) = params::wait_for(store, rv, req.resource_version_wait).await
    {
        return Ok(error_event(&e));
    }
    let render = if req.wants_table() {
        let include = IncludeObject::from_str(req.param("includeObject").unwrap_or(""))
            .map_err(|e| ApiError::bad_request(e.to_string()))?;
        Render::Table {
            include,
            first: true,
        }
    } else {
        Render::Object
    };
    let start = match store.watch(
        &t.rt,
        t.namespace.as_deref(),
        if streaming_list { None } else { from },
    ) {
        Ok(s) => s,
        Err(e) if e.reason == Reason::Expired => return Ok(error_event(&e)),
        Err(e) => return Err(e),
    };
    let stream = Stream {
        rt: t.rt.clone(),
        clock: store.clock(),
        filter,
        backlog: start.backlog.into(),
        live: start.live,
        deadline: Instant::now() + timeout,
        bookmarks: req.flag("allowWatchBookmarks"),
        initial_events_end: streaming_list.then_some(start.resource_version),
        last_rv: start.resource_version,
        from_rv: if streaming_list { 0 } else { from.unwrap_or(0) },
        render,
        drop_at: req.drop_watch_after.map(|after| Instant::now() + after),
    };
    // `None` as state: the stream ended after an error item.
    let body = futures::stream::unfold(Some(stream), |state| async move {
        let mut s = state?;
        match s.next().await {
            Step::Line(line) => Some((Ok(line), Some(s))),
            Step::End => None,
            Step::Drop => Some((
                Err(std::io::Error::new(
                    std::io::ErrorKind::ConnectionReset,
                    "watch dropped (injected fault)",
                )),
                None,
            )),
        }
    });
    Ok(streaming_response(Body::from_stream(body)))
}

/// One watch line `{"type":…,"object":…}` around an object already encoded as JSON.
fn object_line(event_type: &str, object: &[u8]) -> Bytes {
    let mut line = Vec::with_capacity(object.len() + 32);
    line.extend_from_slice(b"{\"type\":\"");
    line.extend_from_slice(event_type.as_bytes());
    line.extend_from_slice(b"\",\"object\":");
    line.extend_from_slice(object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

/// A watch answered with one ERROR event carrying `e` (how kube-apiserver reports a
/// resourceVersion older than its history to a watch, or one a streaming list waited for in
/// vain).
pub(crate) fn error_event(e: &ApiError) -> Response {
    let mut line =
        serde_json::to_vec(&json!({"type": "ERROR", "object": e.status()})).unwrap_or_default();
    line.push(b'\n');
    streaming_response(Body::from(line))
}

fn streaming_response(body: Body) -> Response {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

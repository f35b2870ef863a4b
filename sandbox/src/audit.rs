//! An audit log of the writes clients make over HTTP (method, path, user agent, status), so tests
//! can prove who created what — e.g. that the controller never creates a Node. In-process actors
//! write to the store directly and do not appear here, as kubelets are not API clients of the
//! controller either.

use std::collections::VecDeque;
use std::sync::Mutex;

/// How many entries are kept.
const CAPACITY: usize = 200_000;

/// One write request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntry {
    /// `POST`, `PUT`, `PATCH` or `DELETE`.
    pub method: String,
    /// Request path, e.g. `/api/v1/nodes`.
    pub path: String,
    /// The client's User-Agent header.
    pub user_agent: String,
    /// HTTP status of the response.
    pub status: u16,
}

/// A bounded in-memory audit log.
#[derive(Debug, Default)]
pub struct AuditLog(Mutex<VecDeque<AuditEntry>>);

impl AuditLog {
    /// Record a request, dropping the oldest entry when full.
    pub fn record(&self, entry: AuditEntry) {
        let mut log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() >= CAPACITY {
            log.pop_front();
        }
        log.push_back(entry);
    }

    /// Every recorded entry, oldest first.
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

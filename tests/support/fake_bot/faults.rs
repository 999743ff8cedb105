//! Faults injected on demand: one-shot Telegram errors, outages with the
//! proxy's HTML page, dropped and hung connections, slow calls. Touches the
//! state and the connection's cutter.

use std::{
    pin::pin,
    time::{Duration, Instant},
};

use axum::{
    http::{header, StatusCode},
    response::{IntoResponse, Response},
};
use serde_json::Value;

use super::super::serve::Cutter;
use super::model::FakeError;
use super::net_fault::{FaultRule, NetFault};
use super::state::{FakeBot, Inner, Shared};

impl FakeBot {
    /// The next call of `method` (any case) fails with `error`, before any other
    /// check but the network faults. Several stack up, first in first out.
    pub fn fail_next(&self, method: &str, error: FakeError) {
        self.shared.lock().faults.entry(method.to_ascii_lowercase()).or_default().push_back(error);
    }

    /// For `window`, every call of `methods` (any case; none: every method,
    /// `getUpdates` included) is answered with HTTP `status` (a 5xx) and the
    /// HTML page Telegram's proxy gives. See the module doc for teloxide's 10 s
    /// sleep on a 5xx. Ended early by [`Self::end_faults`].
    pub fn outage(&self, methods: &[&str], status: u16, window: Duration) {
        assert!((500..=599).contains(&status), "fake Bot API: an outage answers 5xx, not {status}");
        self.add_fault(FaultRule::window(NetFault::Status(status), methods, window));
    }

    /// For `window`, every call of `methods` (none: every method) has its
    /// connection closed without an answer: `RequestError::Network` in teloxide.
    pub fn drop_connections(&self, methods: &[&str], window: Duration) {
        self.add_fault(FaultRule::window(NetFault::Drop, methods, window));
    }

    /// The next call of `method` (any case) has its connection closed without
    /// an answer. Several stack up, one call each.
    pub fn drop_next(&self, method: &str) {
        self.add_fault(FaultRule::next_call(NetFault::Drop, method));
    }

    /// The next call of `method` (any case) is taken in and never answered,
    /// until [`Self::release_hangs`] or the fake is dropped; it has no effect.
    /// Recorded as it comes in, so [`Self::wait_for`] sees it hang.
    pub fn hang_next(&self, method: &str) {
        self.add_fault(FaultRule::next_call(NetFault::Hang, method));
    }

    /// For `window`, every call of `methods` (none: every method) hangs as
    /// with [`Self::hang_next`].
    pub fn hang_calls(&self, methods: &[&str], window: Duration) {
        self.add_fault(FaultRule::window(NetFault::Hang, methods, window));
    }

    /// Every later call of `methods` is answered as usual, but only after
    /// `delay`, as over a slow uplink; until [`Self::end_faults`]. A call
    /// whose client gives up first has no effect.
    pub fn slow_calls(&self, methods: &[&str], delay: Duration) {
        let mut inner = self.shared.lock();
        for method in methods {
            inner.slow.insert(method.to_ascii_lowercase(), delay);
        }
    }

    /// Ends the calls hanging now by closing their connections (they stay
    /// without effect), and cancels the hangs still to come, so later calls
    /// get through.
    pub fn release_hangs(&self) {
        {
            let mut inner = self.shared.lock();
            inner.net_faults.retain(|rule| rule.fault != NetFault::Hang);
            inner.releases += 1;
        }
        self.shared.released.notify_waiters();
    }

    /// Ends every fault: outages, dropped connections, hangs (released as by
    /// [`Self::release_hangs`]) and the [`Self::fail_next`] ones not used yet.
    pub fn end_faults(&self) {
        {
            let mut inner = self.shared.lock();
            inner.net_faults.clear();
            inner.slow.clear();
            inner.faults.clear();
            inner.releases += 1;
        }
        self.shared.released.notify_waiters();
    }

    pub(super) fn add_fault(&self, rule: FaultRule) {
        self.shared.lock().net_faults.push(rule);
    }
}

impl Inner {
    /// The network fault that hits this call of `method`, if any, used up.
    pub(super) fn take_net_fault(&mut self, method: &str) -> Option<NetFault> {
        let now = Instant::now();
        self.net_faults.retain(|rule| !rule.is_over(now));
        let rule = self.net_faults.iter_mut().find(|rule| rule.hits(method))?;
        if let Some(left) = &mut rule.calls_left {
            *left -= 1;
        }
        Some(rule.fault)
    }
}

/// Answers a call hit by a network fault, before it could have any effect.
pub(super) async fn inject(
    shared: &Shared,
    fault: NetFault,
    method: &str,
    params: Value,
    releases: u64,
    cutter: &Cutter,
) -> Response {
    // Recorded first: a hung call would otherwise never show.
    shared.record_fault(method, params, fault);
    match fault {
        NetFault::Status(code) => proxy_page(code),
        NetFault::Drop => cut(cutter),
        NetFault::Hang => {
            wait_for_release(shared, releases).await;
            cut(cutter)
        }
    }
}

/// What Telegram's nginx front answers when the Bot API behind it is down.
pub(super) fn proxy_page(code: u16) -> Response {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY);
    let title = format!("{} {}", status.as_u16(), status.canonical_reason().unwrap_or("Error"));
    let page = format!(
        "<html>\r\n<head><title>{title}</title></head>\r\n<body>\r\n<center><h1>{title}</h1></center>\r\n\
         <hr><center>nginx/1.18.0</center>\r\n</body>\r\n</html>\r\n"
    );
    (status, [(header::CONTENT_TYPE, "text/html"), (header::SERVER, "nginx/1.18.0")], page).into_response()
}

/// Closes the call's connection; the response returned is never written.
pub(super) fn cut(cutter: &Cutter) -> Response {
    cutter.cut();
    StatusCode::SERVICE_UNAVAILABLE.into_response()
}

/// Waits until hangs are released after `releases`, or the fake is dropped.
pub(super) async fn wait_for_release(shared: &Shared, releases: u64) {
    loop {
        let mut woken = pin!(shared.released.notified());
        woken.as_mut().enable();
        {
            let inner = shared.lock();
            if inner.closed || inner.releases != releases {
                return;
            }
        }
        woken.await;
    }
}

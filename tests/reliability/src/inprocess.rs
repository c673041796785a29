//! The app (what the local server serves) over the memory substrate, served in-process through
//! `ds_serve::serve_connection` (real HTTP/1.1 parsing, no socket), with a
//! panic counter: a panic inside a handler only kills its connection's task,
//! so it is counted here instead of being lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use ds_core::{ServiceConfig, StreamService};

use crate::client::InProcess;

static PANICS: AtomicU64 = AtomicU64::new(0);
static HOOK: Once = Once::new();

/// Panics seen in this process since [`count_panics`] was first called.
pub fn panics() -> u64 {
    PANICS.load(Ordering::SeqCst)
}

/// Count every panic of this process (then report it as before).
pub fn count_panics() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            previous(info);
        }));
    });
}

/// Short timeouts so stalled and live cases finish quickly.
pub fn quick_limits() -> (ServiceConfig, ds_http::HttpConfig, ds_serve::ConnLimits) {
    let service = ServiceConfig {
        long_poll_timeout: Duration::from_millis(300),
        sse_max_duration: Duration::from_millis(300),
        ..ServiceConfig::default()
    };
    let http = ds_http::HttpConfig { body_read_timeout: Duration::from_millis(300), ..ds_http::HttpConfig::default() };
    let conn = ds_serve::ConnLimits {
        header_read_timeout: Duration::from_millis(300),
        idle_timeout: Duration::from_secs(5),
        send_timeout: Duration::from_secs(2),
        ..ds_serve::ConnLimits::default()
    };
    (service, http, conn)
}

/// The app (what the local server serves) over a fresh memory substrate,
/// with [`quick_limits`].
pub fn memory_target() -> (InProcess, StreamService) {
    let (service_cfg, http, conn) = quick_limits();
    let (sub, due) = ds_store_memory::memory_substrate();
    let service = StreamService::new(sub, service_cfg);
    let svc = service.clone();
    tokio::spawn(async move { svc.run_expiry_loop(due).await });
    let app = ds_http::app_with(service.clone(), http, ds_http::Operations::default());
    (InProcess { app, limits: Arc::new(conn) }, service)
}

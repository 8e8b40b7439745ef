//! The accept loop: HTTP/1.1 connections served by hyper with a deadline for each request's
//! headers (a client that trickles them, or sends nothing, is disconnected) and a cap on open
//! connections (more are closed at once, so slow clients cannot use up the file descriptors),
//! and a graceful stop. `axum::serve` offers neither limit.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// What bounds the connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnectionLimits {
    /// Most connections open at once.
    pub(crate) max_connections: usize,
    /// Time a client has to send a request's headers (from the connection's start, or the end
    /// of the previous request).
    pub(crate) header_timeout: Duration,
}

/// Serves `app` on `listener` until `stop` completes, then stops accepting and waits for the
/// open connections to finish their requests (idle ones are closed).
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    stop: impl Future<Output = ()>,
    limits: ConnectionLimits,
) {
    let graceful = GracefulShutdown::new();
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    tokio::pin!(stop);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: wait for connections to close, go on.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            tracing::warn!("{} connections open (--max-connections): closing a new one", limits.max_connections);
            drop(stream);
            continue;
        };
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
        let connection =
            graceful.watch(builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone())));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection ended: {e}");
            }
            drop(permit);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

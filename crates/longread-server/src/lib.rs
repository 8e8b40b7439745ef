//! longread's HTTP server: whole long documents classified through one batching queue
//! (chunks of concurrent requests share encoder batches), with longread's own route,
//! text-embeddings-inference's and OpenAI's, health, info, Prometheus metrics, an OpenAPI
//! document and a web page. A thin front over `longread_classifier::Classifier` and `Embedder`.
#![deny(missing_docs)]

mod config;
mod connections;
mod error;
mod input;
mod metrics;
mod openapi;
mod routes;
mod state;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

pub use config::ServerConfig;
pub use error::{ApiError, ErrorBody, ErrorType, ServerError};

use state::AppState;

/// A server bound to its address, not yet serving.
pub struct Server {
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
}

impl Server {
    /// Binds `config.host:config.port` (port 0: any free port).
    pub async fn bind(config: ServerConfig) -> Result<Self, ServerError> {
        config.validate()?;
        let address = format!("{}:{}", config.host, config.port);
        let listener = tokio::net::TcpListener::bind(&address)
            .await
            .map_err(|e| ServerError::Io(format!("listening on {address}: {e}")))?;
        // Once the address is bound: a server that never listened is open to no one.
        if let Some(warning) = config.open_access_warning() {
            tracing::warn!("{warning}");
        }
        Ok(Self { listener, state: Arc::new(AppState::new(config)) })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        self.listener.local_addr().map_err(|e| ServerError::Io(e.to_string()))
    }

    /// Serves until `shutdown` completes, then stops accepting, finishes the requests in
    /// flight and returns. The models load in the background meanwhile (GET /health and the
    /// model routes answer 503 until they are); `on_ready` runs once they are, with the
    /// address. A model that fails to load stops the server the same way, with the error.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
        on_ready: impl FnOnce(SocketAddr) + Send + 'static,
    ) -> Result<(), ServerError> {
        self.serve_after(std::future::ready(()), shutdown, on_ready).await
    }

    /// [`Server::serve`], loading the models only once `load_when` completes (the routes
    /// answer 503 meanwhile): for tests of the loading state, and for fronts that bind early.
    pub async fn serve_after(
        self,
        load_when: impl Future<Output = ()> + Send + 'static,
        shutdown: impl Future<Output = ()> + Send + 'static,
        on_ready: impl FnOnce(SocketAddr) + Send + 'static,
    ) -> Result<(), ServerError> {
        let address = self.local_addr()?;
        let state = Arc::clone(&self.state);
        let (failed_tx, failed_rx) = tokio::sync::oneshot::channel::<String>();
        tokio::spawn(async move {
            load_when.await;
            let loaded = tokio::task::spawn_blocking(move || state.load()).await;
            match loaded {
                Ok(Ok(())) => on_ready(address),
                Ok(Err(message)) => {
                    // Said now (requests in flight may hold the stop for --shutdown-timeout);
                    // the reason is the error `serve` returns, printed once by its caller.
                    tracing::error!("the model failed to load; stopping");
                    let _ = failed_tx.send(message);
                }
                Err(e) => {
                    let _ = failed_tx.send(format!("the loading task failed: {e}"));
                }
            }
        });
        #[cfg(unix)]
        reload_on_hangup(Arc::clone(&self.state));
        let app = routes::router(Arc::clone(&self.state));
        let failed = Arc::new(tokio::sync::Mutex::new(None::<String>));
        let failed_in = Arc::clone(&failed);
        let stopping = Arc::new(tokio::sync::Notify::new());
        let stopping_in = Arc::clone(&stopping);
        let stop = async move {
            tokio::select! {
                () = shutdown => {}
                Ok(message) = failed_rx => { *failed_in.lock().await = Some(message); }
            }
            stopping_in.notify_one();
        };
        let limits = connections::ConnectionLimits {
            max_connections: self.state.config.max_connections,
            header_timeout: self.state.config.request_timeout,
        };
        let serving = connections::serve(self.listener, app, stop, limits);
        // Requests in flight get --shutdown-timeout to finish once the signal came; then the
        // server returns and drops them (as Kubernetes would kill it after its grace period).
        let deadline = self.state.config.shutdown_timeout;
        let drained = async move {
            stopping.notified().await;
            tokio::time::sleep(deadline).await;
        };
        tokio::select! {
            () = serving => {}
            () = drained => tracing::warn!(
                "requests still in flight {:.0} s after the stop signal were dropped (--shutdown-timeout)",
                deadline.as_secs_f64()
            ),
        }
        let load_failure = failed.lock().await.take();
        match load_failure {
            Some(message) => Err(ServerError::Config(format!("the model failed to load: {message}"))),
            None => Ok(()),
        }
    }
}

/// Runs a server until SIGTERM or SIGINT (Ctrl-C), on its own runtime: binds, prints
/// nothing itself; `on_ready` runs with the address once the models are loaded. In-flight
/// requests finish before it returns.
pub fn run(config: ServerConfig, on_ready: impl FnOnce(SocketAddr) + Send + 'static) -> Result<(), ServerError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("longread-http")
        .build()
        .map_err(|e| ServerError::Io(format!("starting the async runtime: {e}")))?;
    runtime.block_on(async move {
        let server = Server::bind(config).await?;
        server.serve(termination(), on_ready).await
    })
}

/// Reloads the models on every SIGHUP ([`AppState::reload`]), as servers reread their files
/// on it: after `longread threshold` or `calibrate` changed the model, or a retraining
/// replaced it, without dropping a request. A SIGHUP before the models first loaded is
/// ignored (it no longer stops the process).
#[cfg(unix)]
fn reload_on_hangup(state: Arc<AppState>) {
    let mut hangups = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(e) => {
            tracing::warn!("SIGHUP will not reload the models: {e}");
            return;
        }
    };
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            if state.loaded().is_err() {
                tracing::warn!("SIGHUP: the models are not loaded yet; nothing reloaded");
                continue;
            }
            tracing::info!("SIGHUP: reloading the models");
            let reloading = Arc::clone(&state);
            let result = match tokio::task::spawn_blocking(move || reloading.reload()).await {
                Ok(Ok(())) => {
                    tracing::info!("reloaded the models; new requests use them");
                    "ok"
                }
                Ok(Err(message)) => {
                    tracing::error!("reloading the models failed, still serving the ones loaded before: {message}");
                    "failed"
                }
                Err(e) => {
                    tracing::error!("reloading the models failed: {e}");
                    "failed"
                }
            };
            state.metrics.reloads.get_or_create(&metrics::Outcome { result }).inc();
        }
    });
}

/// Completes on SIGTERM or SIGINT.
async fn termination() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

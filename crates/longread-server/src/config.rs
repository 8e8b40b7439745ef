//! The server's settings (`longread serve`'s flags).

use std::path::PathBuf;

use longread_model::{DeviceChoice, Precision};

/// Everything that shapes a server.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct ServerConfig {
    /// Model directory to classify with: any directory `longread init`, `train` or `ensemble`
    /// writes (hierarchical, single-chunk, HAN, bag of words, an ensemble).
    #[cfg_attr(feature = "clap", arg(long))]
    pub model: PathBuf,
    /// An encoder directory (config.json, model.safetensors, tokenizer.json), or a Hugging Face
    /// Hub id such as sentence-transformers/all-MiniLM-L6-v2, that serves
    /// POST /embed and POST /v1/embeddings (pooled as sentence-transformers pools it, see
    /// --embedding-pooling); without it those routes answer 404.
    #[cfg_attr(feature = "clap", arg(long))]
    pub embedding_model: Option<PathBuf>,
    /// How the embedding model pools token vectors: mean or cls. Default: what its
    /// sentence-transformers Pooling module says (`1_Pooling/config.json`: CLS for the BGE
    /// models), else mean; a mode longread does not compute (max, last token) must be overridden.
    #[cfg_attr(feature = "clap", arg(long, value_enum))]
    pub embedding_pooling: Option<longread_model::sentence_pooling::SentencePooling>,
    /// Address to listen on. Keep 127.0.0.1 unless a proxy or firewall guards the port.
    #[cfg_attr(feature = "clap", arg(long, default_value = "127.0.0.1"))]
    pub host: String,
    /// Port to listen on (0: any free port; the ready line names it).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 8080))]
    pub port: u16,
    /// Most tokens (chunks × padded length) per encoder batch; chunks of concurrent requests
    /// share batches. Default: 8192 on the CPU, 65536 on a GPU.
    #[cfg_attr(feature = "clap", arg(long))]
    pub max_batch_tokens: Option<usize>,
    /// Read and keep chunk vectors in DIR, as `predict --vector-cache` does: a document whose
    /// chunks were encoded before by the same encoder weights, chunking and precision (by this
    /// server, `predict`, `eval` or a head-only `train`) skips the encoder and is answered
    /// from its vectors. Default: none.
    #[cfg_attr(feature = "clap", arg(long, value_name = "DIR"))]
    pub vector_cache: Option<PathBuf>,
    /// Requests classified or embedded at once; more are answered 429.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 64))]
    pub max_concurrent_requests: usize,
    /// Most bytes of input text held by the requests in flight, all together (the server's
    /// memory grows with the text it is tokenizing and encoding, tens of bytes per byte of
    /// text); a request that would go over it is answered 429 unless it would be alone.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 64 * 1024 * 1024))]
    pub max_inflight_text_bytes: usize,
    /// Seconds a classify request may wait for its answer (queueing and encoding); past it its
    /// remaining work is cancelled and it is answered 503 with Retry-After (0: no limit).
    #[cfg_attr(feature = "clap", arg(long = "max-queue-time", value_parser = parse_seconds, default_value = "300"))]
    pub max_queue_time: std::time::Duration,
    /// Most characters in one input text; longer ones are answered 413.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 2_000_000))]
    pub max_input_chars: usize,
    /// Most texts in one request; more are answered 413.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 32))]
    pub max_client_batch_size: usize,
    /// Most bytes in one request body; larger bodies are answered 413.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 32 * 1024 * 1024))]
    pub max_body_bytes: usize,
    /// Encoder precision (as for `predict`). Default: f32 on the CPU, bf16 on a GPU; int8 (CPU
    /// only) is faster on CPUs with AVX-512 VNNI or AVX2. HAN and bag-of-words models take f32
    /// only and run on the CPU.
    #[cfg_attr(feature = "clap", arg(long, value_enum))]
    pub precision: Option<Precision>,
    /// Occlusion evidence in /classify's chunks (`occlusion`: the label's probability minus
    /// its probability without the chunk; hierarchical models only, as `predict --occlusion`).
    /// The head runs once more per chunk: a cost that grows with the square of a document's
    /// chunks (none past 2,048 chunks).
    #[cfg_attr(feature = "clap", arg(long))]
    pub occlusion: bool,
    /// Where the encoders run (the global `--device`).
    #[cfg_attr(feature = "clap", arg(skip))]
    pub device: DeviceChoice,
    /// Require `Authorization: Bearer KEY` on every route but GET /health and GET /ping (compared in
    /// constant time; 401 otherwise). Default: none. Prefer the environment variable to the
    /// flag, which other users can read in the process list.
    #[cfg_attr(feature = "clap", arg(long, env = "LONGREAD_API_KEY", hide_env_values = true))]
    pub api_key: Option<String>,
    /// Let pages from these origins call the server from a browser (CORS headers and preflight
    /// answers): `scheme://host[:port]` as browsers send it (e.g. `https://app.example.com`, no
    /// path or trailing slash), several by repeating the flag or separated by commas, or `*`
    /// for any. Default: none, so other sites' pages cannot read its answers.
    #[cfg_attr(
        feature = "clap",
        arg(long, value_name = "ORIGIN", value_delimiter = ',', env = "LONGREAD_CORS_ALLOW_ORIGIN")
    )]
    pub cors_allow_origin: Vec<String>,
    /// Show the model directories' full paths in GET /info (default: their names only).
    #[cfg_attr(feature = "clap", arg(long))]
    pub info_paths: bool,
    /// Seconds a client has to send a request's headers, and then its body (from the
    /// connection's start or its previous request's end); slower clients are disconnected (a
    /// slow body is answered 408).
    #[cfg_attr(feature = "clap", arg(long = "request-timeout", value_parser = parse_seconds, default_value = "30"))]
    pub request_timeout: std::time::Duration,
    /// Most connections open at once; more are closed as they arrive (keeps slow or idle
    /// clients from using up the file descriptors).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 512))]
    pub max_connections: usize,
    /// Seconds that requests in flight get to finish after SIGTERM or Ctrl-C; then they are
    /// dropped and the server exits (Kubernetes' default grace period is 30 s).
    #[cfg_attr(feature = "clap", arg(long = "shutdown-timeout", value_parser = parse_seconds, default_value = "25"))]
    pub shutdown_timeout: std::time::Duration,
}

/// Seconds (a non-negative number) as a duration.
#[cfg(feature = "clap")]
fn parse_seconds(text: &str) -> Result<std::time::Duration, String> {
    let seconds: f64 = text.parse().map_err(|_| format!("{text:?} is not a number of seconds"))?;
    std::time::Duration::try_from_secs_f64(seconds).map_err(|_| format!("{text:?} is not a number of seconds ≥ 0"))
}

/// Whether `origin` is one a browser can send (`scheme://host[:port]`, lower case not
/// required), or `*` given alone; the reason and the fix otherwise.
fn check_origin(origin: &str, given: usize) -> Result<(), String> {
    if origin == "*" {
        return if given == 1 { Ok(()) } else { Err("`*` allows every origin: give it alone".into()) };
    }
    let Some((scheme, authority)) = origin.split_once("://") else {
        return Err(format!(
            "an origin starts with its scheme, as browsers send it (e.g. \"https://{}\")",
            origin.trim_end_matches('/')
        ));
    };
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    if !scheme_ok {
        return Err(format!("{scheme:?} is not a URL scheme"));
    }
    if let Some(at) = authority.find(['/', '?', '#']) {
        return Err(format!(
            "an origin has no path, query or trailing slash: give \"{scheme}://{}\"",
            &authority[..at]
        ));
    }
    if authority.contains('@') || authority.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("an origin is scheme://host[:port], with no spaces or user name".into());
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, rest)) => (host, Some(rest.strip_prefix(':').unwrap_or(rest))),
            None => return Err("an IPv6 host needs its closing ']'".into()),
        },
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    if host.is_empty() {
        return Err("the origin names no host".into());
    }
    if let Some(port) = port.filter(|p| p.parse::<u16>().is_err() || !p.bytes().all(|b| b.is_ascii_digit())) {
        return Err(format!("{port:?} is not a port number"));
    }
    Ok(())
}

impl ServerConfig {
    /// The settings of a server for `model` with every default.
    pub fn new(model: impl Into<PathBuf>) -> Self {
        Self {
            model: model.into(),
            embedding_model: None,
            embedding_pooling: None,
            host: "127.0.0.1".into(),
            port: 8080,
            max_batch_tokens: None,
            vector_cache: None,
            max_concurrent_requests: 64,
            max_inflight_text_bytes: 64 * 1024 * 1024,
            max_queue_time: std::time::Duration::from_secs(300),
            max_input_chars: 2_000_000,
            max_client_batch_size: 32,
            max_body_bytes: 32 * 1024 * 1024,
            precision: None,
            occlusion: false,
            device: DeviceChoice::default(),
            api_key: None,
            cors_allow_origin: Vec::new(),
            info_paths: false,
            shutdown_timeout: std::time::Duration::from_secs(25),
            request_timeout: std::time::Duration::from_secs(30),
            max_connections: 512,
        }
    }

    /// Refuses settings that cannot work (zero limits).
    pub fn validate(&self) -> Result<(), crate::ServerError> {
        let zero = [
            ("--max-batch-tokens", self.max_batch_tokens.unwrap_or(1)),
            ("--max-concurrent-requests", self.max_concurrent_requests),
            ("--max-inflight-text-bytes", self.max_inflight_text_bytes),
            ("--max-input-chars", self.max_input_chars),
            ("--max-client-batch-size", self.max_client_batch_size),
            ("--max-body-bytes", self.max_body_bytes),
            ("--max-connections", self.max_connections),
        ];
        if let Some((flag, _)) = zero.iter().find(|(_, v)| *v == 0) {
            return Err(crate::ServerError::Config(format!("{flag} must be at least 1")));
        }
        if self.request_timeout.as_millis() == 0 {
            return Err(crate::ServerError::Config("--request-timeout must be at least 0.001 (seconds)".into()));
        }
        for origin in &self.cors_allow_origin {
            check_origin(origin, self.cors_allow_origin.len())
                .map_err(|why| crate::ServerError::Config(format!("--cors-allow-origin {origin:?}: {why}")))?;
        }
        if self.api_key.as_deref().is_some_and(|k| k.trim().is_empty()) {
            return Err(crate::ServerError::Config("--api-key must not be empty".into()));
        }
        Ok(())
    }

    /// Whether the server listens on a loopback address only (then the Host header must name
    /// the machine itself: a guard against DNS rebinding).
    pub fn on_loopback(&self) -> bool {
        matches!(self.host.as_str(), "localhost" | "::1" | "[::1]")
            || self.host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// A warning for a server that other machines may reach with no `--api-key` (every route
    /// open to them); `None` on loopback or with a key.
    pub fn open_access_warning(&self) -> Option<String> {
        (!self.on_loopback() && self.api_key.is_none()).then(|| {
            format!(
                "listening on {} without --api-key: anyone who can reach this port may classify with the model \
                 (set --api-key or LONGREAD_API_KEY, or keep the default --host 127.0.0.1 behind a proxy)",
                self.host
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::ServerConfig;

    #[test]
    fn only_a_server_open_to_other_machines_without_a_key_is_warned_about() {
        let mut config = ServerConfig::new("model");
        assert_eq!(config.open_access_warning(), None, "loopback");
        for host in ["0.0.0.0", "::", "192.168.1.5"] {
            config.host = host.into();
            let warning = config.open_access_warning().expect(host);
            assert!(warning.starts_with(&format!("listening on {host} without --api-key")), "{warning}");
        }
        config.api_key = Some("secret".into());
        assert_eq!(config.open_access_warning(), None, "with a key");
    }

    #[test]
    fn origins_a_browser_cannot_send_are_refused_with_the_fix() {
        let refusal = |origins: &[&str]| {
            let config = ServerConfig {
                cors_allow_origin: origins.iter().map(|o| o.to_string()).collect(),
                ..ServerConfig::new("model")
            };
            config.validate().err().map(|e| e.to_string())
        };
        for fine in [&["*"][..], &["https://app.example.com"], &["http://localhost:3000", "https://[::1]:8443"]] {
            assert_eq!(refusal(fine), None, "{fine:?}");
        }
        let cases = [
            (&["https://app.example.com/"][..], "no path, query or trailing slash: give \"https://app.example.com\""),
            (&["app.example.com"], "starts with its scheme, as browsers send it (e.g. \"https://app.example.com\")"),
            (&["https://app.example.com:http"], "\"http\" is not a port number"),
            (&["https://a.example:99999"], "\"99999\" is not a port number"),
            (&["https://"], "the origin names no host"),
            (&["https://user@app.example"], "no spaces or user name"),
            (&["https://a.example\nX-Evil: 1"], "no spaces or user name"),
            (&["https://[::1"], "closing ']'"),
            (&["*", "https://app.example.com"], "`*` allows every origin: give it alone"),
        ];
        for (origins, why) in cases {
            let message = refusal(origins).unwrap_or_else(|| panic!("{origins:?} was accepted"));
            assert!(message.contains("--cors-allow-origin") && message.contains(why), "{origins:?}: {message}");
        }
    }

    #[test]
    fn a_request_timeout_under_a_millisecond_is_refused_in_seconds() {
        let config = ServerConfig { request_timeout: std::time::Duration::from_micros(100), ..ServerConfig::new("m") };
        let message = config.validate().unwrap_err().to_string();
        assert!(message.contains("--request-timeout must be at least 0.001 (seconds)"), "{message}");
    }
}

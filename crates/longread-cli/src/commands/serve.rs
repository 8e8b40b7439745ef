//! `longread serve`: the HTTP server (`longread_server`); this command parses flags, starts
//! it and prints the ready line.

use std::io::Write;

use anyhow::Result;
use longread_server::ServerConfig;

/// Arguments of `longread serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    config: ServerConfig,
}

/// Serves until SIGTERM or Ctrl-C; prints `listening on http://ADDRESS` once the models are
/// loaded (stdout, flushed, so that scripts can wait for it).
pub fn run(mut args: ServeArgs, device: longread_model::DeviceChoice) -> Result<()> {
    args.config.device = device;
    let model = args.config.model.display().to_string();
    longread_server::run(args.config, move |address| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "longread serve: listening on http://{address} (model {model}); stop with Ctrl-C");
        let _ = out.flush();
    })?;
    Ok(())
}

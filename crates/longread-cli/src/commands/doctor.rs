//! `longread doctor`: what this machine offers longread — the CPU's kernels, and for NVIDIA
//! GPUs the driver, each card and the CUDA libraries — and what keeps a GPU run from working.

use anyhow::{bail, Result};
use clap::Args;
use longread_model::doctor::examine;
use longread_model::DeviceChoice;

/// Arguments of `longread doctor`.
#[derive(Debug, Args)]
#[command(after_help = "Exit status 0, or 1 when --device cuda[:N] was given and that GPU cannot be used here \
(each reason is named: a binary built without CUDA, no driver, no card, a card older than compute capability \
8.0, a card this binary's kernels were not built for, a missing CUDA library). Examples: `longread doctor`, \
`longread doctor --device cuda` in a GPU job's first line, `longread doctor --json`.")]
pub struct DoctorArgs {
    /// Print the findings as one JSON object (cpu, gpu with its devices, libraries and
    /// "missing") instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `longread doctor`; `device` is the global --device: a GPU asked for must be usable.
pub fn run(args: DoctorArgs, device: DeviceChoice) -> Result<()> {
    let report = examine();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.to_text());
    }
    if let DeviceChoice::Cuda(n) = device {
        if !report.gpu_ready() {
            let reasons = report.gpu.missing.len();
            bail!("--device {device}: not usable here ({reasons} reason(s) above: \"missing\" in --json)");
        }
        if n >= report.gpu.devices.len() {
            bail!("--device {device}: the driver sees {} GPU(s), numbered from 0", report.gpu.devices.len());
        }
    }
    Ok(())
}

//! The host's CPU time by function while a benchmark runs: with `LONGREAD_HOST_PROFILE=FILE`
//! (and the `host-profile` feature, on in scripts/build_cuda.sh's build), `bench --workload
//! train` samples every thread's stack 997 times a CPU second during its timed steps (pprof's
//! `SIGPROF` sampler) and writes FILE: the functions the host was in (self) and those on its
//! stack (inclusive), most samples first. On a GPU, a step whose GPU waits for the host (the
//! bench's `head_start` and timeline say when) spends that host time somewhere; the GPU machine
//! has no `perf`, so the binary samples itself.

use std::collections::HashMap;
use std::path::PathBuf;

use crate::error::Result;

/// Samples per CPU second (prime: not in step with the step's own periods).
const FREQUENCY: i32 = 997;

/// A running host profile (see the module's doc).
pub struct HostProfile {
    out: PathBuf,
    sampler: imp::Sampler,
}

impl HostProfile {
    /// Starts sampling when `LONGREAD_HOST_PROFILE` names a file; `None` when it does not, or
    /// (with a warning) when this build has no sampler or it could not start.
    pub fn start() -> Option<Self> {
        let out = PathBuf::from(std::env::var_os("LONGREAD_HOST_PROFILE")?);
        match imp::Sampler::start() {
            Ok(sampler) => Some(Self { out, sampler }),
            Err(why) => {
                tracing::warn!("LONGREAD_HOST_PROFILE is set, but no host profile is taken: {why}");
                None
            }
        }
    }

    /// Stops sampling and writes the report to the file named at the start (atomically).
    pub fn finish(self) -> Result<()> {
        let stacks = self.sampler.stacks()?;
        let text = report(&stacks, FREQUENCY);
        let tmp = self.out.with_extension("tmp");
        let io = |source| crate::error::TrainError::Io { path: self.out.clone(), source };
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, &self.out).map_err(io)
    }
}

/// One sampled stack: function names from the innermost out, and how many samples it got.
pub(crate) struct Stack {
    pub(crate) functions: Vec<String>,
    pub(crate) samples: usize,
}

/// The report: total samples, then the top functions by self and by inclusive samples.
pub(crate) fn report(stacks: &[Stack], frequency: i32) -> String {
    let total: usize = stacks.iter().map(|s| s.samples).sum();
    let mut own: HashMap<&str, usize> = HashMap::new();
    let mut inclusive: HashMap<&str, usize> = HashMap::new();
    for stack in stacks {
        if let Some(leaf) = stack.functions.first() {
            *own.entry(leaf).or_default() += stack.samples;
        }
        let mut seen: Vec<&str> = Vec::new();
        for f in &stack.functions {
            if !seen.contains(&f.as_str()) {
                seen.push(f);
                *inclusive.entry(f).or_default() += stack.samples;
            }
        }
    }
    let mut out = format!(
        "host CPU samples: {total} at {frequency} per CPU second ({:.3} CPU s), every thread\n",
        total as f64 / f64::from(frequency)
    );
    let share = |n: usize| 100.0 * n as f64 / total.max(1) as f64;
    for (title, counts, top) in
        [("self (the function running)", own, 60), ("inclusive (anywhere on the stack)", inclusive, 120)]
    {
        let mut rows: Vec<(&str, usize)> = counts.into_iter().collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        out.push_str(&format!("\n{title}, the {top} most sampled:\n{:>8} {:>6}  function\n", "samples", "share"));
        for (name, n) in rows.into_iter().take(top) {
            out.push_str(&format!("{n:>8} {:>5.1}%  {name}\n", share(n)));
        }
    }
    out
}

/// `path::to::f::h0123456789abcdef` → `path::to::f` (a Rust symbol's hash adds nothing).
#[cfg_attr(not(feature = "host-profile"), allow(dead_code))]
pub(crate) fn without_hash(name: &str) -> &str {
    match name.rsplit_once("::h") {
        Some((head, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => head,
        _ => name,
    }
}

/// A function's name with its source file where known (`forward` alone names a dozen):
/// `forward (longread-model/src/encoder/mod.rs)`, the path from its crate's folder on.
#[cfg_attr(not(feature = "host-profile"), allow(dead_code))]
pub(crate) fn named(function: &str, file: Option<&str>) -> String {
    let Some(file) = file else { return function.to_string() };
    let parts: Vec<&str> = file.split('/').collect();
    // From the folder before `src` (the crate's), else the last two parts.
    let from = parts.iter().rposition(|p| *p == "src").map_or(parts.len().saturating_sub(2), |i| i.saturating_sub(1));
    format!("{function} ({})", parts[from..].join("/"))
}

#[cfg(feature = "host-profile")]
mod imp {
    use super::{named, without_hash, Stack, FREQUENCY};
    use crate::error::{Result, TrainError};

    pub(super) struct Sampler(pprof::ProfilerGuard<'static>);

    impl Sampler {
        pub(super) fn start() -> std::result::Result<Self, String> {
            // Not sampled inside the C library's and the unwinder's own code (pprof's advice:
            // unwinding from there can deadlock); the CUDA driver is sampled.
            pprof::ProfilerGuardBuilder::default()
                .frequency(FREQUENCY)
                .blocklist(&["libc", "libgcc", "pthread", "vdso"])
                .build()
                .map(Self)
                .map_err(|e| e.to_string())
        }

        pub(super) fn stacks(self) -> Result<Vec<Stack>> {
            let report = self.0.report().build().map_err(|e| TrainError::Run(format!("host profile: {e}")))?;
            Ok(report
                .data
                .iter()
                .map(|(frames, &count)| Stack {
                    functions: frames
                        .frames
                        .iter()
                        .flat_map(|frame| {
                            frame.iter().map(|s| {
                                let file = s.filename.as_deref().map(|f| f.to_string_lossy().into_owned());
                                named(without_hash(&s.name()), file.as_deref())
                            })
                        })
                        .collect(),
                    samples: count.max(0) as usize,
                })
                .collect())
        }
    }
}

#[cfg(not(feature = "host-profile"))]
mod imp {
    use super::Stack;
    use crate::error::Result;

    pub(super) enum Sampler {}

    impl Sampler {
        pub(super) fn start() -> std::result::Result<Self, String> {
            Err("this longread was built without the `host-profile` feature (scripts/build_cuda.sh has it)".into())
        }

        pub(super) fn stacks(self) -> Result<Vec<Stack>> {
            match self {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(functions: &[&str], samples: usize) -> Stack {
        Stack { functions: functions.iter().map(|f| f.to_string()).collect(), samples }
    }

    #[test]
    fn self_and_inclusive_samples_are_counted_once_per_stack() {
        let stacks =
            [stack(&["launch", "matmul", "step"], 3), stack(&["alloc", "matmul", "step"], 1), stack(&["step"], 2)];
        let text = report(&stacks, 100);
        assert!(text.starts_with("host CPU samples: 6 at 100 per CPU second (0.060 CPU s)"), "{text}");
        let (own, inclusive) = text.split_once("inclusive").unwrap();
        assert!(own.contains("       3  50.0%  launch\n") && own.contains("       2  33.3%  step\n"), "{own}");
        assert!(
            inclusive.contains("       6 100.0%  step\n") && inclusive.contains("       4  66.7%  matmul\n"),
            "{inclusive}"
        );
        // A recursive function on one stack counts once.
        let text = report(&[stack(&["f", "f", "g"], 5)], 100);
        assert!(text.contains("       5 100.0%  f\n"), "{text}");
    }

    #[test]
    fn functions_are_named_with_their_crates_file() {
        let file = "/work/main/crates/longread-model/src/encoder/mod.rs";
        assert_eq!(named("forward", Some(file)), "forward (longread-model/src/encoder/mod.rs)");
        let registry = "/root/.cargo/registry/src/index/candle-core-0.11.1/src/tensor.rs";
        assert_eq!(named("matmul", Some(registry)), "matmul (candle-core-0.11.1/src/tensor.rs)");
        assert_eq!(named("memcpy", Some("/usr/lib/x.c")), "memcpy (lib/x.c)");
        assert_eq!(named("cuLaunchKernel", None), "cuLaunchKernel");
    }

    #[test]
    fn rust_symbol_hashes_are_dropped() {
        assert_eq!(
            without_hash("candle_core::tensor::Tensor::matmul::h0123456789abcdef"),
            "candle_core::tensor::Tensor::matmul"
        );
        assert_eq!(without_hash("cuLaunchKernel"), "cuLaunchKernel");
        assert_eq!(without_hash("a::hash"), "a::hash");
    }

    #[test]
    fn nothing_is_sampled_without_the_variable() {
        if std::env::var_os("LONGREAD_HOST_PROFILE").is_none() {
            assert!(HostProfile::start().is_none());
        }
    }
}

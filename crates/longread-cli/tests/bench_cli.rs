//! `longread bench`: each workload runs and reports a median, the runs and the peak memory;
//! bad shapes are clear errors.

mod common;

use common::{assert_clean_failure, longread};
use serde_json::Value;

#[test]
fn every_workload_reports_its_median_and_peak_memory() {
    for workload in ["encoder-forward", "train-step", "optimizer-step", "han-step"] {
        let out = longread(&[
            "bench",
            "--workload",
            workload,
            "--preset",
            "tiny",
            "--shape",
            "2x16",
            "--repeat",
            "2",
            "--json",
        ]);
        assert!(out.status.success(), "{workload}: {}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let runs: Vec<f64> = v["runs"].as_array().unwrap().iter().map(|r| r.as_f64().unwrap()).collect();
        assert_eq!(runs.len(), 2, "{v}");
        let seconds = v["seconds"].as_f64().unwrap();
        assert!(runs.contains(&seconds) && seconds > 0.0, "the median is one of the runs: {v}");
        assert!(v["warmup_seconds"].as_f64().unwrap() > 0.0, "the untimed first run's time: {v}");
        assert_eq!(v["workload"], workload);
        assert!(v["parameters"].as_u64().unwrap() > 100_000, "the tiny preset or the HAN: {v}");
        assert!(v["peak_rss_bytes"].as_u64().unwrap() > 0, "{v}");
    }
}

#[test]
fn bad_bench_settings_are_refused() {
    assert_clean_failure(
        &longread(&["bench", "--workload", "train-step", "--shape", "4by512"]),
        "expected BATCHxTOKENS",
    );
    assert_clean_failure(
        &longread(&["bench", "--workload", "encoder-forward", "--preset", "tiny", "--shape", "1x9999"]),
        "the encoder takes 1 to 512 tokens",
    );
    assert_clean_failure(&longread(&["bench", "--workload", "encoder-forward", "--preset", "huge"]), "unknown preset");
    assert_clean_failure(
        &longread(&["bench", "--workload", "han-step", "--shape", "100000x100"]),
        "documents × sentences at most",
    );
    assert_clean_failure(
        &longread(&["--device", "cpu", "bench", "--workload", "kernels", "--shape", "2x512"]),
        "give --device cuda",
    );
    assert_clean_failure(
        &longread(&["--device", "cpu", "bench", "--workload", "kernels", "--preset", "huge"]),
        "unknown preset",
    );
}

/// `bench --workload predict` classifies synthetic documents of full chunks with a model
/// directory and reports documents/s with the device and precision it ran on.
#[test]
fn predict_workload_reports_documents_per_second_and_the_device() {
    let model = common::fixture("hier/roberta-attention");
    let out = longread(&[
        "--device",
        "cpu",
        "bench",
        "--workload",
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--shape",
        "3x2",
        "--repeat",
        "2",
        "--json",
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["workload"].as_str(), v["device"].as_str(), v["precision"].as_str()),
        (Some("predict"), Some("cpu"), Some("f32"))
    );
    assert_eq!((v["docs"].as_u64(), v["chunks_per_doc"].as_u64()), (Some(3), Some(2)));
    let seconds = v["seconds"].as_f64().unwrap();
    assert!((v["docs_per_s"].as_f64().unwrap() - 3.0 / seconds).abs() < 1e-6 * (3.0 / seconds), "{v}");
    assert!(v.get("profile").is_none(), "no step times unless LONGREAD_PROFILE is set: {v}");
    assert!(v["warmup_seconds"].as_f64().unwrap() > 0.0, "the first run's time: {v}");
    assert!(v["peak_gpu_bytes"].is_null(), "no GPU memory on the CPU: {v}");
    assert_clean_failure(
        &longread(&["bench", "--workload", "predict", "--shape", "3x2"]),
        "--workload predict needs --model",
    );
}

/// Asking for a GPU this build or machine does not have is one clear line and exit code 1,
/// for every command that loads an encoder.
#[test]
fn a_missing_gpu_is_a_one_line_error() {
    let model = common::fixture("hier/roberta-attention");
    let docs = common::fixture("hier/documents.jsonl");
    let out = longread(&[
        "--device",
        "cuda:63",
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--input",
        docs.to_str().unwrap(),
    ]);
    assert_clean_failure(&out, "cuda:63");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("`cuda` feature") || stderr.contains("visible"), "{stderr}");
    // Training too, and it leaves no output directory behind.
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let train = common::fixture("synthetic/train.jsonl");
    let out = longread(&[
        "--device",
        "cuda:63",
        "train",
        "--train",
        train.to_str().unwrap(),
        "--model",
        common::fixture("tiny-bert").to_str().unwrap(),
        "--out",
        run.to_str().unwrap(),
    ]);
    assert_clean_failure(&out, "cuda:63");
    assert!(!run.exists(), "a run that could not start leaves no --out");
    // A device that is not one is a usage error, as clap reports any bad flag value (exit code 2).
    let out = longread(&["--device", "tpu", "predict", "--model", "x", "--input", "y"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("expected auto, cpu, cuda or cuda:N") && !stderr.contains("panicked"), "{stderr}");
}

/// `--workload train`: a classifier's whole training step on the CPU here (the GPU check runs
/// it on CUDA), with and without recomputation, in f32 and bf16; the loss is finite.
#[test]
fn the_training_step_workload_reports_documents_per_second() {
    let model = common::fixture("hier/roberta-attention");
    for extra in [&[][..], &["--no-recompute"][..], &["--precision", "bf16"][..], &["--max-batch-tokens", "8"][..]] {
        let mut args = vec!["bench", "--workload", "train", "--model", model.to_str().unwrap(), "--shape", "2x3"];
        args.extend_from_slice(&["--repeat", "2", "--json"]);
        args.extend_from_slice(extra);
        let out = longread(&args);
        assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let seconds = v["seconds"].as_f64().unwrap();
        assert!((v["docs_per_s"].as_f64().unwrap() - 2.0 / seconds).abs() < 1e-6 * (2.0 / seconds), "{v}");
        assert!(v["loss"].as_f64().unwrap().is_finite() && v["loss"].as_f64().unwrap() > 0.0, "{v}");
        assert!(v["warmup_seconds"].as_f64().unwrap() > 0.0, "{v}");
        assert_eq!(v["recompute"], !extra.contains(&"--no-recompute"), "{v}");
        // `train`'s default budget on the CPU (one chunk of 512), or the one given.
        assert_eq!(v["max_batch_tokens"], if extra.contains(&"8") { 8 } else { 512 }, "{v}");
        // Documents of 3 short chunks fit the default batch (encoded once) unless recomputation
        // is off (whole graph, by chunk batches) or the batch is smaller than a chunk.
        let kept = if extra.contains(&"--no-recompute") || extra.contains(&"8") { 0 } else { 2 };
        assert_eq!(
            (v["kept_documents"].as_u64(), v["chunked_documents"].as_u64()),
            (Some(kept), Some(2 - kept)),
            "{v}"
        );
        assert_eq!(v["device"], "cpu");
        assert!(v["peak_gpu_bytes"].is_null(), "no GPU memory on the CPU: {v}");
        assert!(v.get("profile").is_none(), "{v}");
    }
    assert_clean_failure(
        &longread(&["bench", "--workload", "train", "--model", model.to_str().unwrap(), "--precision", "int8"]),
        "--precision f32 or bf16",
    );
    assert_clean_failure(&longread(&["bench", "--workload", "train", "--shape", "2x3"]), "needs --model");
}

/// The HAN step runs on the CPU unless a GPU is named (`auto` is the CPU for it, as for `train
/// --arch han`), says where it ran, and a GPU this build or machine lacks is a clean error.
#[test]
fn the_han_step_runs_where_it_is_asked_to() {
    let args = ["bench", "--workload", "han-step", "--shape", "2x3", "--repeat", "1", "--json"];
    for device in [&[][..], &["--device", "auto"][..], &["--device", "cpu"][..]] {
        let out = longread(&[device, &args[..]].concat());
        assert!(out.status.success(), "{device:?}: {}", String::from_utf8_lossy(&out.stderr));
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!((v["workload"].as_str(), v["device"].as_str()), (Some("han-step"), Some("cpu")), "{device:?}: {v}");
    }
    assert_clean_failure(&longread(&[&["--device", "cuda:63"][..], &args[..]].concat()), "cuda:63");
}

/// With `LONGREAD_PROFILE=1` the training step is also timed in parts and op by op (the table
/// a GPU run needs to show where the step goes): JSON rows for machines, a table for people.
#[test]
fn a_profiled_training_step_reports_its_parts_and_ops() {
    let model = common::fixture("hier/roberta-attention");
    let args = ["bench", "--workload", "train", "--model", model.to_str().unwrap(), "--shape", "2x3", "--repeat", "1"];
    let run = |json: bool| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_longread"));
        command.args(args).env("LONGREAD_PROFILE", "1");
        if json {
            command.arg("--json");
        }
        let out = command.output().expect("running longread");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let v: Value = serde_json::from_str(&run(true)).unwrap();
    let profile = &v["profile"];
    for part in ["forward_s", "gradients_s", "grad_norm_s", "optimizer_s"] {
        assert!(profile[part].as_f64().unwrap() > 0.0, "{part}: {profile}");
    }
    let ops = profile["ops"].as_array().unwrap();
    let find = |phase: &str, op: &str| {
        ops.iter()
            .find(|r| r["phase"] == phase && r["op"] == op)
            .unwrap_or_else(|| panic!("no {phase} {op}: {profile}"))
    };
    // Two layers of q, k, v, attention-output and two feed-forward products, each with a
    // gradient, in both phases (on the CPU the dense products are one custom op; the head's
    // and pooling's products are candle's matmul).
    for phase in ["forward", "backward"] {
        let product = find(phase, "custom dense-product");
        assert!(product["calls"].as_u64().unwrap() >= 12, "{product}");
        assert_eq!(product["dtype"], "f32");
        assert!(find(phase, "matmul")["calls"].as_u64().unwrap() >= 1);
    }
    let seconds: Vec<f64> = ops.iter().map(|r| r["seconds"].as_f64().unwrap()).collect();
    assert!(seconds.windows(2).all(|p| p[0] >= p[1]), "longest first: {profile}");
    assert!(profile["forward_steps"].is_array(), "{profile}");
    let text = run(false);
    assert!(text.contains("parts (each waited for on its own): forward"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("backward") && l.contains("matmul")), "{text}");
}

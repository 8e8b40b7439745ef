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
}

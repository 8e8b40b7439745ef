//! Per-label temperature scaling against PyTorch (fixture by
//! `scripts/make_calibration_fixtures.py`): each label's temperature of least
//! `BCEWithLogitsLoss(z / T, y)` as L-BFGS finds it in float64, the loss there, and the
//! calibrated probabilities σ(z / T) the calibration gives every document.

use std::path::PathBuf;

use longread_classifier::decision::label_temperature;
use serde_json::Value;

fn fixture() -> Value {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/calibration/label_temperatures.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn of<T: serde::de::DeserializeOwned>(v: &Value) -> T {
    serde_json::from_value(v.clone()).unwrap()
}

#[test]
fn each_labels_temperature_and_calibrated_probabilities_match_pytorch() {
    let f = fixture();
    let labels: Vec<String> = of(&f["labels"]);
    let probabilities: Vec<Vec<f32>> = of(&f["probabilities"]);
    let truth: Vec<Vec<bool>> = of(&f["truth"]);
    let temperatures: Vec<f64> = of(&f["temperatures"]);
    let losses: Vec<f64> = of(&f["losses"]);
    let calibrated: Vec<Vec<f32>> = of(&f["calibrated"]);

    let fitted = label_temperature::fit(&labels, &truth, &probabilities, None, String::new()).unwrap();
    for ((fit, want), loss) in fitted.labels.iter().zip(&temperatures).zip(&losses) {
        assert!(
            (fit.temperature - want).abs() <= 1e-4 * want,
            "{}: T {} vs PyTorch {want}",
            fit.label,
            fit.temperature
        );
        assert!(
            (fit.log_loss.after - loss).abs() <= 1e-6,
            "{}: loss {} vs PyTorch {loss}",
            fit.label,
            fit.log_loss.after
        );
        assert!(!fit.one_class && !fit.at_bound);
    }
    let mut worst = 0f32;
    for (got, want) in fitted.calibrated.iter().zip(&calibrated) {
        for (g, w) in got.iter().zip(want) {
            worst = worst.max((g - w).abs());
        }
    }
    assert!(worst <= 1e-4, "calibrated probabilities differ from PyTorch's by {worst}");
    // The calibration as every front applies it gives the same probabilities.
    let applied: Vec<Vec<f32>> = probabilities.iter().map(|row| fitted.calibration.apply(row)).collect();
    let worst =
        applied.iter().flatten().zip(calibrated.iter().flatten()).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(worst <= 1e-4, "Temperature::apply differs from PyTorch's by {worst}");
}

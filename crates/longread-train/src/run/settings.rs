//! A run's settings as written to `training_args.json`, and the check that a resumed run uses
//! the same ones (flags and data), so that resuming never silently changes a run.

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Result, TrainError};
use crate::run::spec::TrainSpec;

/// A stable fingerprint of a file's bytes (64-bit FNV-1a, as hex), to notice that the data of a
/// resumed run changed. Not a security hash. Read in blocks: memory stays flat in the file's size.
pub fn fingerprint_file(path: &Path) -> Result<String> {
    use std::io::Read;
    let err = |source| TrainError::Io { path: path.to_owned(), source };
    let mut file = std::fs::File::open(path).map_err(err)?;
    let (mut hash, mut block) = (FNV_OFFSET, vec![0u8; 1 << 16]);
    loop {
        match file.read(&mut block) {
            Ok(0) => break,
            Ok(n) => hash = fnv1a64(hash, &block[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(err(e)),
        }
    }
    Ok(format!("fnv1a64:{hash:016x}"))
}

/// FNV-1a's 64-bit offset basis: the hash of nothing.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// `hash` continued over `bytes`.
fn fnv1a64(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3))
}

/// Compares the settings of the run being resumed (`saved`, from its training_args.json) with
/// `current`, ignoring the keys in `may_change` (e.g. how progress is logged); refuses with one
/// line per difference.
pub fn check_resume_settings(saved: &Value, current: &Value, may_change: &[&str]) -> Result<()> {
    let empty = Map::new();
    let (saved, current) = (saved.as_object().unwrap_or(&empty), current.as_object().unwrap_or(&empty));
    let mut keys: Vec<&String> = saved.keys().chain(current.keys()).collect();
    keys.sort();
    keys.dedup();
    let differences: Vec<String> = keys
        .into_iter()
        .filter(|k| !may_change.contains(&k.as_str()))
        .filter_map(|k| {
            let (a, b) = (saved.get(k).unwrap_or(&Value::Null), current.get(k).unwrap_or(&Value::Null));
            (a != b).then(|| format!("  {}: the run used {a}, this command gives {b}", k.replace('_', "-")))
        })
        .collect();
    if differences.is_empty() {
        return Ok(());
    }
    Err(TrainError::Run(format!(
        "--resume: these settings differ from the run being resumed (its training_args.json); resume with the \
         run's own settings and data, or start a new run with another --out:\n{}",
        differences.join("\n")
    )))
}

/// Refuses to resume the run in `out` with settings other than its own (its
/// training_args.json), ignoring `may_change`; settings an older longread did not record are not
/// checked.
pub fn check_resumed_run(out: &Path, settings: &Value, may_change: &[&str]) -> Result<()> {
    let path = out.join("training_args.json");
    let text = std::fs::read_to_string(&path).map_err(|source| TrainError::Io { path: path.clone(), source })?;
    let saved: Value =
        serde_json::from_str(&text).map_err(|e| TrainError::Run(format!("{}: invalid JSON: {e}", path.display())))?;
    let recorded: Vec<&str> = saved.as_object().map(|o| o.keys().map(String::as_str).collect()).unwrap_or_default();
    let unrecorded: Vec<String> = settings
        .as_object()
        .map(|o| o.keys().filter(|k| !recorded.contains(&k.as_str())).cloned().collect())
        .unwrap_or_default();
    let mut ignored: Vec<&str> = may_change.to_vec();
    ignored.extend(unrecorded.iter().map(String::as_str));
    check_resume_settings(&saved, settings, &ignored)
}

/// What training_args.json records: every setting as resolved (defaults filled in) and a
/// fingerprint of the training and dev data, so that a resumed run can be checked against it
/// (data read from standard input cannot be fingerprinted).
fn run_settings(spec: &TrainSpec) -> Result<serde_json::Value> {
    let mut settings =
        serde_json::to_value(spec).map_err(|e| TrainError::Run(format!("recording the settings: {e}")))?;
    let fingerprint = |path: &Path| -> Result<serde_json::Value> {
        // Standard input, a pipe (`--dev <(...)`) or a device can be read once only: the data.
        if crate::run::one_shot::is_one_shot(path) {
            return Ok(serde_json::Value::Null);
        }
        Ok(fingerprint_file(path)?.into())
    };
    let mut data = serde_json::json!({"train": fingerprint(&spec.train)?});
    if let Some(dev) = &spec.dev {
        data["dev"] = fingerprint(dev)?;
    }
    settings["data_fingerprints"] = data;
    Ok(settings)
}

/// [`run_settings`] with the front's own settings (`front`) added: what training_args.json holds.
pub(crate) fn recorded_settings(
    spec: &TrainSpec,
    front: serde_json::Map<String, serde_json::Value>,
) -> Result<serde_json::Value> {
    let mut settings = run_settings(spec)?;
    if let Some(obj) = settings.as_object_mut() {
        obj.extend(front);
    }
    Ok(settings)
}

/// Settings that may differ when a run is resumed: how it is resumed, logged and stopped, and
/// how much of the frozen-layer cache stays in memory (none changes the results), whether a
/// threshold is tuned or the model calibrated when it completes, and the device (a run moved to another device continues from the same state, though not
/// bit-identically to staying put: the devices round differently).
pub(crate) const MAY_CHANGE_ON_RESUME: [&str; 12] = [
    "device",
    // Apply when the run completes, to the model it kept.
    "tune_threshold",
    "calibrate",
    "vector_cache",
    "resume",
    "out",
    "stop_after_epoch",
    "save_every_steps",
    "log_format",
    "cache_memory",
    "no_cache",
    "max_bad_steps",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_stable_and_differ_with_the_bytes() {
        // FNV-1a's published test values.
        assert_eq!(fnv1a64(FNV_OFFSET, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(FNV_OFFSET, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fnv1a64(FNV_OFFSET, b"label,a"), fnv1a64(FNV_OFFSET, b"label,b"));
        // A file is hashed in blocks: the hash of its bytes in one piece, across block ends.
        let bytes: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let tmp = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(tmp.path(), &bytes).unwrap();
        assert_eq!(fingerprint_file(tmp.path()).unwrap(), format!("fnv1a64:{:016x}", fnv1a64(FNV_OFFSET, &bytes)));
    }

    #[test]
    fn every_difference_is_named_and_allowed_keys_are_ignored() {
        let saved = serde_json::json!({"epochs": 3, "lr": 2e-5, "log_format": "text", "train_data": "x"});
        let same = serde_json::json!({"epochs": 3, "lr": 2e-5, "log_format": "json", "train_data": "x"});
        check_resume_settings(&saved, &same, &["log_format"]).unwrap();
        let other = serde_json::json!({"epochs": 5, "lr": 2e-5, "log_format": "text", "train_data": "y"});
        let err = check_resume_settings(&saved, &other, &["log_format"]).unwrap_err().to_string();
        assert!(err.contains("epochs: the run used 3, this command gives 5"), "{err}");
        assert!(err.contains("train-data: the run used \"x\", this command gives \"y\""), "{err}");
        assert_eq!(err.lines().count(), 3, "{err}");
    }
}

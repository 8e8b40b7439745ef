//! Resumable checkpoints inside an output directory: `checkpoint-NNNNN/` directories and the
//! symbolic link `checkpoint-last` to the newest, swapped atomically.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::Tensor;

use crate::error::{Result, TrainError};

/// The link to the newest checkpoint inside an output directory.
pub const CHECKPOINT: &str = "checkpoint-last";

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> TrainError {
    let path = path.to_owned();
    move |source| TrainError::Io { path, source }
}

/// Writes the checkpoint `name` (`checkpoint-…`: an epoch or a step) into `out` with `write`,
/// which must create that directory atomically (assembled in a temporary directory, synced,
/// renamed), then points the symbolic link `out/checkpoint-last` at it (a new link renamed
/// over the old one: atomic), and only then removes older checkpoints. A kill at any moment
/// leaves `checkpoint-last` naming a complete checkpoint.
pub fn save_checkpoint(out: &Path, name: &str, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let dir = out.join(name);
    let link = out.join(CHECKPOINT);
    // Left over by a run killed before it linked this checkpoint: not in use.
    if dir.exists() && std::fs::read_link(&link).ok().as_deref() != Some(Path::new(name)) {
        std::fs::remove_dir_all(&dir).map_err(io(&dir))?;
    }
    write(&dir)?;
    write_checksums(&dir)?;
    if link.is_dir() && std::fs::symlink_metadata(&link).is_ok_and(|m| m.is_dir()) {
        // A checkpoint directory from an older version of longread.
        std::fs::remove_dir_all(&link).map_err(io(&link))?;
    }
    let tmp_link = out.join(format!(".{CHECKPOINT}-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp_link);
    std::os::unix::fs::symlink(name, &tmp_link).map_err(io(&tmp_link))?;
    std::fs::rename(&tmp_link, &link).map_err(io(&link))?;
    if let Ok(d) = std::fs::File::open(out) {
        let _ = d.sync_all();
    }
    remove_other_checkpoints(out, Some(name))
}

/// Removes `out/checkpoint-*` directories other than `keep` (and the link itself when
/// `keep` is `None`), and the temporary files and directories of writes a killed run left
/// unfinished in `out` (called when no write of this run is under way).
pub fn remove_other_checkpoints(out: &Path, keep: Option<&str>) -> Result<()> {
    let entries = std::fs::read_dir(out).map_err(io(out))?;
    let temporary = [".longread-".to_string(), ".model-".to_string(), format!(".{CHECKPOINT}-")];
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let result = if name == CHECKPOINT {
            if keep.is_some() {
                continue;
            }
            std::fs::remove_file(&path)
        } else if (name.starts_with("checkpoint-") && Some(name.as_str()) != keep)
            || temporary.iter().any(|t| name.starts_with(t.as_str()))
        {
            if is_dir {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            }
        } else {
            continue;
        };
        result.map_err(io(&path))?;
    }
    Ok(())
}

/// The checkpoint a run continues from: none for a new run (whose `out` must not exist),
/// `out/checkpoint-last` for `auto`, or the directory given, which must be a checkpoint of the
/// run in `out` (a checkpoint of another run would continue it without its metrics and
/// settings: refused at once).
pub fn resume_from(out: &Path, resume: Option<&str>) -> Result<Option<PathBuf>> {
    let checkpoint = match resume {
        None if out.exists() => {
            // The hint fits what is there: a run to continue, a finished run, or anything else
            // (an `init` directory has no run to resume).
            let what_to_do = if out.join(CHECKPOINT).join("trainer_state.json").is_file() {
                "choose another --out, or continue its run with --resume auto".to_string()
            } else if out.join("metrics.jsonl").is_file() {
                format!(
                    "its run has finished; to train further, start a new run from its model: --model {} --out ANOTHER",
                    out.display()
                )
            } else {
                "choose another --out (or remove it)".to_string()
            };
            return Err(TrainError::Run(format!("{} already exists; {what_to_do}", out.display())));
        }
        None => return Ok(None),
        Some("auto") => out.join(CHECKPOINT),
        Some(dir) => PathBuf::from(dir),
    };
    if !checkpoint.join("trainer_state.json").is_file() {
        let why = match resume {
            Some("auto") if !out.exists() => {
                format!("{} does not exist (start the run without --resume)", out.display())
            }
            Some("auto") if !checkpoint.exists() && out.join("metrics.jsonl").is_file() => format!(
                "the run in {} has finished (its {CHECKPOINT}/ is removed at the end); to train further, start a \
                 new run from its model: --model {} --out ANOTHER",
                out.display(),
                out.display()
            ),
            _ => format!(
                "{} is not a checkpoint (no trainer_state.json){}",
                checkpoint.display(),
                if resume == Some("auto") { format!(" in {}", out.display()) } else { String::new() }
            ),
        };
        return Err(TrainError::Run(format!("nothing to resume: {why}")));
    }
    let run_of = |dir: &Path| dir.canonicalize().ok().and_then(|d| d.parent().map(Path::to_owned));
    if resume != Some("auto") && run_of(&checkpoint) != out.canonicalize().ok() {
        return Err(TrainError::Run(format!(
            "--resume {}: that checkpoint belongs to the run in {}, not to --out {}; give that directory as --out \
             (with --resume auto)",
            checkpoint.display(),
            run_of(&checkpoint).map_or("another directory".into(), |d| d.display().to_string()),
            out.display()
        )));
    }
    verify_checksums(&checkpoint)?;
    Ok(Some(checkpoint))
}

/// The file in a checkpoint directory that lists a CRC-32 per file.
pub const CHECKSUMS: &str = "checksums.json";

/// CRC-32 of a file, streamed.
fn crc32_of(path: &Path) -> Result<u32> {
    use std::io::Read;
    let mut file = std::fs::File::open(path).map_err(io(path))?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buffer).map_err(io(path))?;
        if n == 0 {
            return Ok(hasher.finalize());
        }
        hasher.update(&buffer[..n]);
    }
}

/// Writes `dir/checksums.json`: `{"crc32": {file: "8 hex digits"}}` for every file of the
/// checkpoint (written atomically, before the checkpoint is linked as the last one).
fn write_checksums(dir: &Path) -> Result<()> {
    let mut sums = std::collections::BTreeMap::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == CHECKSUMS || !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        sums.insert(name, format!("{:08x}", crc32_of(&entry.path())?));
    }
    let text = serde_json::to_string_pretty(&serde_json::json!({ "crc32": sums })).unwrap_or_default() + "\n";
    longread_model::model_dir::write_file_atomically(&dir.join(CHECKSUMS), text.as_bytes())?;
    Ok(())
}

/// Checks every file `checksums.json` lists against its CRC-32 (checkpoints written before
/// checksums existed have none and pass): a flipped byte or a truncated file is refused,
/// naming the file, instead of being resumed from.
pub fn verify_checksums(dir: &Path) -> Result<()> {
    let path = dir.join(CHECKSUMS);
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(()) };
    let corrupt = |why: String| {
        TrainError::Run(format!(
            "{}: {why}; the checkpoint is corrupt: resume from an earlier one (--resume DIR) or start again",
            dir.display()
        ))
    };
    let listed: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| corrupt(format!("{CHECKSUMS} is not valid JSON ({e})")))?;
    let sums = listed["crc32"].as_object().ok_or_else(|| corrupt(format!("{CHECKSUMS} has no \"crc32\" object")))?;
    for (name, want) in sums {
        let file = dir.join(name);
        if !file.is_file() {
            return Err(corrupt(format!("{name} is missing")));
        }
        let got = format!("{:08x}", crc32_of(&file)?);
        if Some(got.as_str()) != want.as_str() {
            return Err(corrupt(format!("{name} does not match its checksum (CRC-32 {got}, recorded {want})")));
        }
    }
    Ok(())
}

/// What a checkpoint holds besides the model: the run's state, AdamW's steps per parameter
/// and its moments.
pub type Saved<S> = (S, HashMap<String, u64>, HashMap<String, Tensor>);

/// A checkpoint's run state (`trainer_state.json`: `state` and `optimizer_steps`) and AdamW
/// moments (`optimizer.safetensors`).
pub fn read_checkpoint<S: serde::de::DeserializeOwned>(dir: &Path) -> Result<Saved<S>> {
    #[derive(serde::Deserialize)]
    struct State<S> {
        state: S,
        optimizer_steps: HashMap<String, u64>,
    }
    let path = dir.join("trainer_state.json");
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    let saved: State<S> = serde_json::from_str(&text)
        .map_err(|e| TrainError::Run(format!("{}: not a trainer state ({e})", path.display())))?;
    let moments_path = dir.join("optimizer.safetensors");
    let moments = candle_core::safetensors::load(&moments_path, &longread_model::device::host())
        .map_err(|e| TrainError::Run(format!("reading {}: {e}", moments_path.display())))?;
    Ok((saved.state, saved.optimizer_steps, moments))
}

/// `err`, when it is [`TrainError::Interrupted`], with where the run stopped (`at`, e.g.
/// ", at an evaluation"), the checkpoint of the run in `out` and how to resume — or, when the
/// run stopped before its first checkpoint (filling a cache), that the same command starts it
/// again; other errors as they are.
pub(crate) fn with_resume_hint(err: TrainError, out: &Path, at: &str) -> TrainError {
    match err {
        TrainError::Interrupted(when) if out.join(CHECKPOINT).exists() => TrainError::Interrupted(format!(
            "{when}{at}; checkpoint {}: the same command with --resume auto continues the run",
            out.join(CHECKPOINT).display()
        )),
        TrainError::Interrupted(when) => TrainError::Interrupted(format!(
            "{when}{at}, before anything was trained (no checkpoint): the same command starts the run again"
        )),
        other => other,
    }
}

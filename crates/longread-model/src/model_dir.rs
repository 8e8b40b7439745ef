//! Writing a model directory atomically: assembled under a temporary name beside the target,
//! every file synced, then renamed into place.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::Tensor;

use crate::error::{ModelError, Result};

/// Writes `tensors` as `model.safetensors` and `files` (name, bytes) into the new directory
/// `out`, which must not exist; a kill at any moment leaves either nothing or all of it.
pub fn write_new_dir(out: &Path, tensors: &HashMap<String, Tensor>, files: &[(&str, &[u8])]) -> Result<()> {
    if out.exists() {
        return Err(ModelError::OutputExists { path: out.to_owned() });
    }
    let tmp = write_temporary_dir(out, tensors, files)?;
    std::fs::rename(&tmp, out).map_err(io(out))
}

/// Writes `tensors` and `files` as a new version of `out`: assembled in a temporary sibling,
/// then swapped in; the previous version is removed only after the new one is in place.
pub fn write_replacing(out: &Path, tensors: &HashMap<String, Tensor>, files: &[(&str, &[u8])]) -> Result<()> {
    let tmp = write_temporary_dir(out, tensors, files)?;
    if out.exists() {
        let old = tmp.with_extension("old");
        std::fs::rename(out, &old).map_err(io(out))?;
        std::fs::rename(&tmp, out).map_err(io(out))?;
        std::fs::remove_dir_all(&old).map_err(io(&old))?;
    } else {
        std::fs::rename(&tmp, out).map_err(io(out))?;
    }
    Ok(())
}

/// Replaces `dir/model.safetensors` with `tensors` atomically (a synced temporary file in
/// `dir`, renamed over it; mode rw-r--r-- less the umask).
pub fn write_weights_file(dir: &Path, tensors: &HashMap<String, Tensor>) -> Result<()> {
    let target = dir.join("model.safetensors");
    write_atomically(&target, |path| Ok(candle_core::safetensors::save(tensors, path)?))
}

/// Replaces `path` with `bytes` atomically (a synced temporary file beside it, renamed over
/// it): a kill at any moment leaves the old file or the new one, never half of one.
pub fn write_file_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomically(path, |tmp| std::fs::write(tmp, bytes).map_err(io(tmp)))
}

/// The text of `path`, or `None` when there is no such file (an optional file of a model
/// directory: decision.json, calibration.json).
pub fn read_if_present(path: &Path) -> Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ModelError::Io { path: path.to_owned(), source }),
    }
}

/// Removes `path`; whether there was such a file.
pub fn remove_if_present(path: &Path) -> Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(ModelError::Io { path: path.to_owned(), source }),
    }
}

/// Replaces several files of one directory with new contents as one change, as far as a
/// file system allows: every new file is written and synced under a temporary name first (a
/// failure there — a full disk, no permission — changes none of them), then each is renamed
/// over its target in turn. Files that must agree with each other (a decision rule restated
/// for a calibration) are written this way.
pub fn write_files_atomically(files: &[(PathBuf, Vec<u8>)]) -> Result<()> {
    let prepared = files
        .iter()
        .map(|(path, bytes)| prepare_temporary(path, |tmp| std::fs::write(tmp, bytes).map_err(io(tmp))))
        .collect::<Result<Vec<_>>>()?;
    for (tmp, (target, _)) in prepared.into_iter().zip(files) {
        tmp.persist(target).map_err(|e| ModelError::Io { path: target.clone(), source: e.error })?;
    }
    Ok(())
}

/// Runs `write` on a temporary file beside `target` (named `.model-*`, mode rw-r--r-- less
/// the umask), syncs it and renames it over `target`.
fn write_atomically(target: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<()> {
    let tmp = prepare_temporary(target, write)?;
    tmp.persist(target).map_err(|e| ModelError::Io { path: target.to_owned(), source: e.error })?;
    Ok(())
}

/// A synced temporary file beside `target` (named `.model-*`, mode rw-r--r-- less the umask)
/// that `write` has filled, for the caller to rename over `target`; removed if dropped.
fn prepare_temporary(target: &Path, write: impl FnOnce(&Path) -> Result<()>) -> Result<tempfile::NamedTempFile> {
    let dir = match target.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".model-");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // Temporary files default to rw-------; a model file is rw-r--r-- (less the umask).
        builder.permissions(std::fs::Permissions::from_mode(0o644));
    }
    let tmp = builder.tempfile_in(&dir).map_err(io(&dir))?;
    let mode = std::fs::metadata(tmp.path()).map_err(io(tmp.path()))?.permissions();
    write(tmp.path())?;
    // The safetensors writer replaces the file with a rw------- one of its own: restore the mode.
    std::fs::set_permissions(tmp.path(), mode).map_err(io(tmp.path()))?;
    std::fs::File::open(tmp.path()).and_then(|f| f.sync_all()).map_err(io(tmp.path()))?;
    Ok(tmp)
}

/// Reads a config.json: a missing file is [`ModelError::MissingFile`] ("model configuration").
pub fn read_config_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            ModelError::MissingFile { path: path.to_owned(), what: "model configuration" }
        } else {
            ModelError::Io { path: path.to_owned(), source }
        }
    })
}

/// Writes `tensors` and `files` into a synced temporary directory beside `out` (named
/// `.longread-save-*`) and returns its path, for the caller to rename into place.
pub fn write_temporary_dir(out: &Path, tensors: &HashMap<String, Tensor>, files: &[(&str, &[u8])]) -> Result<PathBuf> {
    let (tmp, parent) = temporary_dir_beside(out)?;
    let weights = tmp.path().join("model.safetensors");
    candle_core::safetensors::save(tensors, &weights)?;
    let mut written = vec![weights];
    for (name, bytes) in files {
        let path = tmp.path().join(name);
        // A name may hold a folder (a wide-and-deep model's `wide/…`).
        if let Some(folder) = path.parent().filter(|p| *p != tmp.path()) {
            std::fs::create_dir_all(folder).map_err(io(folder))?;
        }
        std::fs::write(&path, bytes).map_err(io(&path))?;
        written.push(path);
    }
    for file in &written {
        std::fs::File::open(file).and_then(|f| f.sync_all()).map_err(io(file))?;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).map_err(io(tmp.path()))?;
        // The safetensors writer makes a rw------- file: give it the other files' mode (rw-r--r--
        // less the umask, as a plain File::create gives), or rw-r--r-- when there are none.
        let mode = match written.get(1) {
            Some(other) => std::fs::metadata(other).map_err(io(other))?.permissions(),
            None => std::fs::Permissions::from_mode(0o644),
        };
        std::fs::set_permissions(&written[0], mode).map_err(io(&written[0]))?;
    }
    let kept = tmp.keep();
    if let Ok(dir) = std::fs::File::open(&parent) {
        let _ = dir.sync_all();
    }
    Ok(kept)
}

/// A new empty directory beside `out` (named `.longread-save-*`, removed when dropped) and
/// `out`'s parent, created if missing: where a model directory is assembled before it is
/// renamed to `out`.
pub fn temporary_dir_beside(out: &Path) -> Result<(tempfile::TempDir, PathBuf)> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&parent).map_err(io(&parent))?;
    let tmp = tempfile::Builder::new().prefix(".longread-save-").tempdir_in(&parent).map_err(io(&parent))?;
    Ok((tmp, parent))
}

/// Maps an I/O error on `path` to [`ModelError::Io`].
pub fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ModelError {
    let path = path.to_owned();
    move |source| ModelError::Io { path, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_written_together_change_none_when_one_cannot_be_written() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("decision.json");
        std::fs::write(&first, "old").unwrap();
        // The second file's folder does not exist: its temporary file cannot be made.
        let second = dir.path().join("missing").join("calibration.json");
        let files = [(first.clone(), b"new".to_vec()), (second.clone(), b"new".to_vec())];
        assert!(write_files_atomically(&files).is_err());
        assert_eq!(std::fs::read_to_string(&first).unwrap(), "old");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, ["decision.json"], "no temporary file is left behind");

        let second = dir.path().join("calibration.json");
        let files = [(first.clone(), b"new".to_vec()), (second.clone(), b"also new".to_vec())];
        write_files_atomically(&files).unwrap();
        assert_eq!(std::fs::read_to_string(&first).unwrap(), "new");
        assert_eq!(std::fs::read_to_string(&second).unwrap(), "also new");
    }
}

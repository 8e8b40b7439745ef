//! Inputs that can be read once: standard input (`-`) and pipes or devices (`--train
//! <(...)`). A run reads its data more than once (the labels, the documents, `--cv`'s folds),
//! so the first read keeps their bytes, and later reads of the same path get those bytes, until
//! the run ends ([`forget`]). Files are read from disk each time.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Result, TrainError};

/// The kept bytes, by path.
static KEPT: Mutex<Option<HashMap<PathBuf, Arc<[u8]>>>> = Mutex::new(None);

/// True for standard input and anything that is not a regular file (a pipe, a device).
pub fn is_one_shot(path: &Path) -> bool {
    path.as_os_str() == "-" || std::fs::metadata(path).is_ok_and(|m| !m.is_file())
}

/// The bytes of a one-shot input: read on first use, the same bytes after.
pub fn bytes(path: &Path) -> Result<Arc<[u8]>> {
    let mut kept = KEPT.lock().unwrap_or_else(PoisonError::into_inner);
    let kept = kept.get_or_insert_with(HashMap::new);
    if let Some(bytes) = kept.get(path) {
        return Ok(Arc::clone(bytes));
    }
    let mut bytes = Vec::new();
    let read = match path.as_os_str() == "-" {
        true => std::io::stdin().lock().read_to_end(&mut bytes),
        false => std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)),
    };
    read.map_err(|source| TrainError::Io { path: path.to_owned(), source })?;
    let bytes: Arc<[u8]> = bytes.into();
    kept.insert(path.to_owned(), Arc::clone(&bytes));
    Ok(bytes)
}

/// Drops every kept input (a run's end: the next run reads its inputs anew).
pub fn forget() {
    *KEPT.lock().unwrap_or_else(PoisonError::into_inner) = None;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_not_one_shot_and_a_pipe_is_read_once() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("data.jsonl");
        std::fs::write(&file, "x").unwrap();
        assert!(!is_one_shot(&file) && is_one_shot(Path::new("-")));
        let fifo = tmp.path().join("fifo");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        assert!(is_one_shot(&fifo));
        let writer = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::write(fifo, b"{\"text\": \"a\"}\n").unwrap())
        };
        let first = bytes(&fifo).unwrap();
        writer.join().unwrap();
        // A second open of the pipe would wait for a writer forever: the kept bytes answer.
        assert_eq!(&*bytes(&fifo).unwrap(), &*first);
        assert_eq!(&*first, b"{\"text\": \"a\"}\n");
        forget();
        assert!(KEPT.lock().unwrap().is_none());
    }
}

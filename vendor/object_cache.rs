//! What vendor/flash-attn/build.rs and vendor/cudnn-attn/build.rs share (each includes this file
//! with `#[path]`): one object compiled by a command and cached per target folder, linked as a
//! static library.

use std::path::{Path, PathBuf};
use std::process::Command;

/// FNV-1a's starting value.
pub const FNV_START: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a of `bytes`, continuing from `hash`.
pub fn fnv(bytes: &[u8], mut hash: u64) -> u64 {
    for &b in bytes {
        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// FNV-1a of every file under `dir` (names and contents, in sorted order).
pub fn fnv_dir(dir: &Path, mut hash: u64) -> u64 {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        hash = fnv(path.to_string_lossy().as_bytes(), hash);
        hash = if path.is_dir() { fnv_dir(&path, hash) } else { fnv(&std::fs::read(&path).unwrap(), hash) };
    }
    hash
}

/// Writes `object` with `cmd` (given without its `-o`), or copies it from the target folder's
/// cache: the object depends only on the sources (`sources`, their hash) and the command, so it
/// is built once per target folder and reused by the other builds there (`cargo check` and
/// `cargo build`, both profiles, other feature sets, the Python package). `what` names the
/// compiler and the source in messages; `name` the cached file (`<name>-<hash>.o`).
pub fn cached_object(mut cmd: Command, sources: u64, object: &Path, out_dir: &Path, name: &str, what: &str) {
    let key = fnv(format!("{cmd:?}").as_bytes(), sources);
    cmd.arg("-o").arg(object);
    // OUT_DIR is <target>/<profile>/build/<crate>-<hash>/out: the cache sits in <target>.
    let cache = out_dir.ancestors().nth(4).map(|target| target.join(format!("{name}-{key:016x}.o")));
    if let Some(cached) = cache.as_ref().filter(|c| c.exists()) {
        std::fs::copy(cached, object).unwrap_or_else(|e| panic!("copying the cached {}: {e}", cached.display()));
        return;
    }
    let status = cmd.status().unwrap_or_else(|e| panic!("running {what}: {e}"));
    assert!(status.success(), "{what} failed ({status})");
    if let Some(cache) = &cache {
        // Written under another name, then renamed: a concurrent build never reads half a file.
        let partial = cache.with_extension(format!("{}.part", std::process::id()));
        if std::fs::copy(object, &partial).is_ok() {
            let _ = std::fs::rename(&partial, cache);
        }
    }
}

/// Archives `objects` as `lib<name>.a` in `out_dir` and links it statically.
pub fn link_static(objects: &[&Path], out_dir: &Path, name: &str) {
    let library = out_dir.join(format!("lib{name}.a"));
    let _ = std::fs::remove_file(&library);
    let status = Command::new("ar").arg("crs").arg(&library).args(objects).status().expect("running ar");
    assert!(status.success(), "ar failed on {objects:?}");
    println!("cargo::rustc-link-search=native={}", out_dir.display());
    println!("cargo::rustc-link-lib=static={name}");
}

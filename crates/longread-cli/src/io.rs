//! Reading inputs (`-` is standard input) and writing outputs atomically.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Opens a file, or standard input for `-`.
pub fn open_input(path: &Path) -> Result<Box<dyn BufRead>> {
    if path.as_os_str() == "-" {
        return Ok(Box::new(BufReader::new(std::io::stdin())));
    }
    let file = File::open(path).with_context(|| format!("opening input {}", path.display()))?;
    Ok(Box::new(BufReader::new(file)))
}

/// Standard input as a buffered reader.
pub fn stdin_reader() -> Box<dyn BufRead> {
    Box::new(BufReader::new(std::io::stdin()))
}

/// A name for messages.
pub fn input_name(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "<stdin>".into()
    } else {
        path.display().to_string()
    }
}

/// Output that becomes visible only when complete: a temporary file beside the target,
/// fsynced and renamed over it by [`Output::commit`]. Dropped without commit, nothing changes.
pub enum Output {
    /// Standard output.
    Stdout(BufWriter<std::io::Stdout>),
    /// A file in the making.
    File {
        /// The temporary file.
        writer: BufWriter<tempfile::NamedTempFile>,
        /// Where it goes.
        target: PathBuf,
    },
}

impl Output {
    /// Standard output when `path` is `None` or `-`, else an atomic file.
    pub fn create(path: Option<&Path>) -> Result<Self> {
        match path {
            None => Ok(Self::Stdout(BufWriter::new(std::io::stdout()))),
            Some(p) if p.as_os_str() == "-" => Ok(Self::Stdout(BufWriter::new(std::io::stdout()))),
            Some(p) => {
                if p.is_dir() {
                    anyhow::bail!("{} is a directory: give the output a file name", p.display());
                }
                let dir = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d,
                    _ => Path::new("."),
                };
                if !dir.is_dir() {
                    anyhow::bail!("{}: the directory {} does not exist (create it first)", p.display(), dir.display());
                }
                let tmp = tempfile::Builder::new()
                    .prefix(".longread-")
                    .permissions(readable_by_all())
                    .tempfile_in(dir)
                    .with_context(|| format!("creating a temporary file in {}", dir.display()))?;
                Ok(Self::File { writer: BufWriter::new(tmp), target: p.to_owned() })
            }
        }
    }

    /// Flushes and, for a file, syncs it and renames it into place.
    pub fn commit(self) -> Result<()> {
        match self {
            Self::Stdout(mut w) => w.flush().context("writing to standard output"),
            Self::File { writer, target } => {
                let tmp = writer.into_inner().map_err(|e| e.into_error()).context("writing output")?;
                tmp.as_file().sync_all().context("syncing output")?;
                // On failure the temporary file is dropped here, which deletes it (kept inside
                // the error, it would outlive the process, holding the whole output).
                tmp.persist(&target)
                    .map_err(|e| e.error)
                    .with_context(|| format!("moving output into place at {}", target.display()))?;
                Ok(())
            }
        }
    }
}

/// rw-r--r-- (less the umask), as a plain `File::create` gives; temporary files default to rw-------.
fn readable_by_all() -> std::fs::Permissions {
    use std::os::unix::fs::PermissionsExt;
    std::fs::Permissions::from_mode(0o644)
}

/// Writes `bytes` to `path` atomically, through [`Output`].
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut out = Output::create(Some(path))?;
    out.write_all(bytes).with_context(|| format!("writing {}", path.display()))?;
    out.commit()
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Self::Stdout(w) => w.write(buf),
            Self::File { writer, .. } => writer.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Stdout(w) => w.flush(),
            Self::File { writer, .. } => writer.flush(),
        }
    }
}

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
pub fn stdin_reader() -> Box<dyn BufRead + Send> {
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

/// Refuses an output (`flag`) that is the input file itself, under any name (a link, `./`):
/// the output replaced the documents with their predictions, and the texts were gone.
pub fn refuse_output_over_input(input: &Path, output: Option<&Path>, flag: &str) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let Some(output) = output.filter(|o| o.as_os_str() != "-") else { return Ok(()) };
    let (Ok(i), Ok(o)) = (std::fs::metadata(input), std::fs::metadata(output)) else { return Ok(()) };
    if i.is_file() && (i.dev(), i.ino()) == (o.dev(), o.ino()) {
        anyhow::bail!(
            "{flag} {} is the input file: writing it would replace the documents; choose another name",
            output.display()
        );
    }
    Ok(())
}

/// Output that becomes visible only when complete: a temporary file beside the target,
/// fsynced and renamed over it by [`Output::commit`]. Dropped without commit, nothing changes.
/// A target that is not a file (`/dev/null`, `/dev/stdout`, a pipe) is written in place, and a
/// symbolic link is followed to its file (see [`resolve_target`]).
pub enum Output {
    /// Standard output.
    Stdout(BufWriter<std::io::Stdout>),
    /// A device, pipe or socket, written as the output is made.
    Stream {
        /// Its writer.
        writer: BufWriter<File>,
        /// Its path, for messages.
        path: PathBuf,
    },
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
                let p = match resolve_target(p)? {
                    Target::File(file) => file,
                    Target::Stream(path) => {
                        // Appending: a descriptor's file (`/dev/stdout` of `>> log`) keeps what it holds
                        // (devices and pipes have no end to append at).
                        let file = std::fs::OpenOptions::new()
                            .append(true)
                            .open(&path)
                            .with_context(|| format!("opening output {}", path.display()))?;
                        return Ok(Self::Stream { writer: BufWriter::new(file), path });
                    }
                };
                let p = p.as_path();
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
            Self::Stream { mut writer, path } => writer.flush().with_context(|| format!("writing {}", path.display())),
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

/// Where an output goes.
enum Target {
    /// A regular file (or none yet): replaced atomically.
    File(PathBuf),
    /// Anything else that exists (a character device such as `/dev/null`, a pipe, a socket):
    /// written in place. Renaming a file over it would replace it: as root, `--output
    /// /dev/null` once put a regular file where the system's /dev/null was.
    Stream(PathBuf),
}

/// The target of an output named `path`: a directory is refused, a device or pipe is a
/// stream, and a symbolic link (a chain of them, dangling or not) is followed to the file it
/// names, so that the link stays and its file is replaced.
fn resolve_target(path: &Path) -> Result<Target> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => anyhow::bail!("{} is a directory: give the output a file name", path.display()),
        Ok(m) if !m.is_file() => return Ok(Target::Stream(path.to_owned())),
        _ => {}
    }
    let mut target = path.to_owned();
    // Linux's own limit on links followed in one lookup.
    for _ in 0..40 {
        match std::fs::symlink_metadata(&target) {
            Ok(m) if m.file_type().is_symlink() => {
                let link = std::fs::read_link(&target).with_context(|| format!("reading link {}", target.display()))?;
                // A relative link is relative to the link's own directory (an absolute one replaces it).
                target = target.parent().map_or_else(|| link.clone(), |dir| dir.join(&link));
                if target.starts_with("/proc") {
                    // `/dev/stdout`, `/dev/fd/N`: an open descriptor, maybe a file opened to
                    // append (`>> log`); it is written through, not replaced.
                    return Ok(Target::Stream(path.to_owned()));
                }
            }
            _ => return Ok(Target::File(target)),
        }
    }
    anyhow::bail!("{}: too many levels of symbolic links", path.display())
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
            Self::Stream { writer, .. } => writer.write(buf),
            Self::File { writer, .. } => writer.write(buf),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Self::Stdout(w) => w.flush(),
            Self::Stream { writer, .. } => writer.flush(),
            Self::File { writer, .. } => writer.flush(),
        }
    }
}
